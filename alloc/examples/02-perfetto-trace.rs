//! Record a replayed training trace and write it as a Chrome trace that Perfetto opens
//! (ui.perfetto.dev, "Open trace file"): counter tracks for in use, reserved and each tag.
//!
//! `cargo run -p headroom-alloc --example 02-perfetto-trace -- memory.json`

use std::fs::File;
use std::io::BufWriter;

use headroom_alloc::trace::{TraceOp, TransformerTrace};
use headroom_alloc::{Allocator, AllocatorConfig, Error, VirtualMemory};

fn main() -> Result<(), Error> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "memory.json".into());
    let limit = 512 << 20;
    let config = AllocatorConfig::default()
        .with_limit_bytes(limit)
        .with_history(100_000);
    let mut alloc = Allocator::new(VirtualMemory::new(limit), config)?;

    let mut addresses = std::collections::HashMap::new();
    for op in TransformerTrace::default().generate() {
        match op {
            TraceOp::Alloc { id, size, tag } => {
                addresses.insert(id, alloc.allocate(size, tag)?.addr);
            }
            TraceOp::Free { id } => {
                if let Some(addr) = addresses.remove(&id) {
                    alloc.free(addr)?;
                }
            }
            TraceOp::Oom { .. } => {}
        }
    }

    let io_error = |source| Error::Io {
        path: path.clone(),
        source,
    };
    let history = alloc.history().expect("recording is on");
    let file = File::create(&path).map_err(io_error)?;
    history
        .write_chrome_trace(BufWriter::new(file))
        .map_err(io_error)?;
    println!("wrote {} events to {path}", history.events().len());
    Ok(())
}
