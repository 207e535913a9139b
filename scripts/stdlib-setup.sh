# Sourced by the jobs that train on the Python standard library's source (real-text.sh,
# fine-tune.sh): builds headroom unless HEADROOM_BIN names one already built, and sets
# `headroom` (the binary), `stdlib` (the library's directory) and `files` (the flags that keep
# its modules: not its tests, its codecs' tables, nor third-party packages beside it).
if [[ -z "${HEADROOM_BIN:-}" ]]; then
    cargo build --release -p headroom-trainer
fi
headroom=${HEADROOM_BIN:-target/release/headroom}
stdlib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
files=(--ext py --skip-dir site-packages --skip-dir dist-packages --skip-dir test
       --skip-dir tests --skip-dir idlelib --skip-dir encodings)
