"""The gradient of an embedding in PyTorch on the CPU, for the cases of `embedding-backward`.

Prints one JSON line per case with the keys op, ids, dtype, positions, vocab, dim, threads, ms,
gbps, like `cargo run --release -p headroom-benches --bin embedding-backward`. It times
`aten.embedding_dense_backward`, what autograd runs for `torch.nn.functional.embedding`'s
gradient; the ids follow the same distributions (drawn by PyTorch, not the same values). See
README.md beside this file.
"""

import json
import os

import torch
from timing import median_seconds

GPT2_VOCAB = 50257
DIM = 768
POSITIONS = 8 * 2048
RUNS = 7


SMALL_TABLE = 16


def cases(large: int) -> list[tuple[str, int]]:
    """(spread, vocabulary) of each case, as headroom_benches::token_ids::embedding_cases lists
    them for embedding-backward and cuda-compare."""
    return [("uniform", large), ("zipf", large), ("one-id", large), ("skewed", SMALL_TABLE)]


def draw(spread: str, positions: int, vocab: int) -> torch.Tensor:
    """`positions` ids below `vocab` spread as headroom_benches::token_ids::IdSpread names."""
    if spread == "uniform":
        return torch.randint(vocab, (positions,))
    if spread == "zipf":
        weights = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
        return torch.multinomial(weights, positions, replacement=True)
    if spread == "one-id":
        return torch.zeros(positions, dtype=torch.long)
    # skewed: id 0 at 90% of positions, the rest uniform
    others = torch.randint(vocab, (positions,))
    return torch.where(torch.rand(positions) < 0.9, torch.zeros_like(others), others)


def main() -> None:
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    torch.manual_seed(7)
    dy = torch.arange(POSITIONS * DIM, dtype=torch.float32).remainder(1000).div(1000).sub(0.5)
    dy = dy.view(POSITIONS, DIM)
    for spread, vocab in cases(GPT2_VOCAB):
        table = "small" if vocab == SMALL_TABLE else "gpt2"
        ids = draw(spread, POSITIONS, vocab)
        backward = lambda: torch.ops.aten.embedding_dense_backward(dy, ids, vocab, -1, False)  # noqa: E731
        seconds = median_seconds(backward, RUNS)
        line = {
            "op": "embedding_backward",
            "ids": f"{table}-{spread}",
            "dtype": "f32",
            "positions": POSITIONS,
            "vocab": vocab,
            "dim": DIM,
            "threads": threads,
            "ms": round(seconds * 1e3, 3),
            "gbps": round((POSITIONS + vocab) * DIM * 4 / seconds / 1e9, 2),
        }
        print(json.dumps(line, separators=(",", ":")))


if __name__ == "__main__":
    main()
