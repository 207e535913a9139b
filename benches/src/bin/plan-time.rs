//! How long `headroom plan` takes: every plan command of the READMEs and the cases that were
//! slow, timed as a user runs them (the binary, start to exit), the median of a few runs;
//! beside another build of `headroom` when `--against PATH` names one, the two alternated run
//! by run so that a busy machine slows both alike. Prints a table, then one JSON line per case
//! with the keys `case, seconds, against_seconds, ratio`.
//!
//! `cargo run --release -p headroom-benches --bin plan-time -- [--headroom PATH]
//! [--against PATH] [--runs N]`; `--headroom` defaults to the `headroom` beside this binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The plans timed, as `headroom plan` arguments.
const CASES: &[&str] = &[
    "--preset gpt2 --data uniform-tokens",
    "--preset gpt2-large --memory-limit 8GiB --data uniform-tokens",
    "--preset gpt2 --data uniform-tokens --memory-policy manual",
    "--preset gpt2 --data uniform-tokens --memory-policy manual --recompute blocks-tiled",
    "--preset gpt2 --data uniform-tokens --memory-limit 1GiB",
    "--preset llama-3.1-8b --device cuda --device-memory 80GiB --data uniform-tokens \
     --batch-size 2 --context 2048",
    "--preset smollm2-135m --data uniform-tokens --context 2048 --batch-size 64 \
     --memory-limit 4GiB --device-memory 64GiB --clip 0",
    "--preset llama-3.1-8b --lora --param-dtype bf16 --device cuda --device-memory 24GiB \
     --data uniform-tokens --batch-size 2 --context 2048",
    "--preset smollm2-360m --base nf4 --lora-rank 16 --param-dtype bf16 --precision bf16 \
     --recompute cheap --data uniform-tokens --batch-size 2 --context 2048 --memory-limit 7GiB",
    "--preset llama-3.1-8b --param-dtype bf16 --precision bf16 --device cuda \
     --device-memory 80GiB --data uniform-tokens --batch-size 1 --context 524288 --clip 0",
    "--preset llama-3.1-8b --param-dtype bf16 --precision bf16 --device cuda \
     --device-memory 4GiB --data uniform-tokens --batch-size 1 --context 2048 --clip 0 \
     --lora-rank 16 --base nf4",
    "--preset llama-3.1-8b --param-dtype bf16 --precision bf16 --device cuda \
     --device-memory 16GiB --data uniform-tokens --batch-size 2 --context 2048 --clip 0",
    "--preset smollm2-135m --data uniform-tokens --context 256 --batch-size 2 --micro-batch 2 \
     --recompute blocks --offload-optimizer --optimizer-in-backward --clip 0",
    "--preset llama-3.2-1b --param-dtype bf16 --precision bf16 --device cuda \
     --device-memory 80GiB --data uniform-tokens --batch-size 4 --context 2048 \
     --recompute blocks --clip 0 --offload-optimizer",
    "--memory-policy manual",
    "--memory-limit 16MiB",
    "--memory-limit 1MiB",
    "--preset gpt2 --data uniform-tokens --memory-limit 300MiB",
    "--preset smollm2-135m --data uniform-tokens --batch-size 8 --context 256 \
     --memory-limit 200MiB --host-limit 1GiB",
    "--preset llama-3.1-8b --device cuda --device-memory 8GiB --data uniform-tokens",
    "--preset gpt2-large --memory-limit 1GiB --data uniform-tokens",
];

/// The command line: the binaries to time and the runs of each case.
struct Options {
    headroom: PathBuf,
    against: Option<PathBuf>,
    runs: usize,
}

impl Options {
    fn parse() -> Result<Self, String> {
        let beside = std::env::current_exe()
            .map_err(|err| format!("this binary's path: {err}"))?
            .with_file_name("headroom");
        let mut options = Self {
            headroom: beside,
            against: None,
            runs: 3,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            match flag.as_str() {
                "--headroom" => options.headroom = value.into(),
                "--against" => options.against = Some(value.into()),
                "--runs" => {
                    options.runs = value
                        .parse()
                        .map_err(|_| format!("--runs {value}: not a count"))?
                }
                _ => return Err(format!("unknown flag {flag}")),
            }
        }
        Ok(options)
    }
}

/// Seconds `headroom plan` with `case`'s arguments takes, start to exit (a plan that fits
/// nothing exits 1 by design; any other failure to run is an error).
fn time_plan(headroom: &Path, case: &str) -> Result<f64, String> {
    let start = Instant::now();
    let status = Command::new(headroom)
        .arg("plan")
        .args(case.split_whitespace())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|err| format!("{}: {err}", headroom.display()))?;
    let seconds = start.elapsed().as_secs_f64();
    match status.code() {
        Some(0 | 1) => Ok(seconds),
        _ => Err(format!("{} plan {case}: {status}", headroom.display())),
    }
}

/// The median of `times`.
fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() -> Result<(), String> {
    let options = Options::parse()?;
    println!("{:>9} {:>9} {:>7}  case", "seconds", "against", "ratio");
    let mut lines = Vec::new();
    for case in CASES {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..options.runs.max(1) {
            ours.push(time_plan(&options.headroom, case)?);
            if let Some(against) = &options.against {
                theirs.push(time_plan(against, case)?);
            }
        }
        let seconds = median(ours);
        let against = (!theirs.is_empty()).then(|| median(theirs));
        let ratio = against.map(|a| a / seconds);
        let shown =
            |x: Option<f64>, digits: usize| x.map_or("-".to_owned(), |x| format!("{x:.digits$}"));
        println!(
            "{seconds:>9.2} {:>9} {:>7}  {case}",
            shown(against, 2),
            shown(ratio, 2)
        );
        let json = |x: Option<f64>| x.map_or("null".to_owned(), |x| format!("{x:.4}"));
        lines.push(format!(
            "{{\"case\":\"{case}\",\"seconds\":{seconds:.4},\"against_seconds\":{},\"ratio\":{}}}",
            json(against),
            json(ratio)
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
