//! TensorBoard's event file format, written: TFRecords (the data's length and its masked
//! CRC-32C, the data, the data's masked CRC-32C) around `Event` protocol buffers of the three
//! kinds a run writes: the file's version, a restart marker and scalar summaries. The few
//! fields are encoded by hand, numbered as TensorBoard's `event.proto` and `summary.proto`
//! number them.

/// The version TensorBoard reads from a file's first event: 2 makes a restart marker drop what
/// earlier files hold from its step on.
pub const FILE_VERSION: &str = "brain.Event:2";

/// What an event holds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum What<'a> {
    /// The file's version ([`FILE_VERSION`]), its first event.
    FileVersion,
    /// A session's start (`SessionLog` with status `START`): TensorBoard drops the events of
    /// earlier files at this step and after.
    Restart,
    /// Scalars by tag (`Summary` of `Value`s with a `simple_value`).
    Scalars(&'a [(String, f32)]),
}

/// One event, its wall time in seconds since the Unix epoch, as one framed record.
pub fn event_record(wall_time: f64, step: u64, what: What<'_>) -> Vec<u8> {
    record(&event(wall_time, step, what))
}

/// The `Event` message. Fields at their default value are left out, as protocol buffers'
/// own encoders leave them out.
fn event(wall_time: f64, step: u64, what: What<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    // wall_time: double, field 1.
    out.push(key(1, FIXED64));
    out.extend_from_slice(&wall_time.to_le_bytes());
    if step != 0 {
        // step: int64, field 2.
        out.push(key(2, VARINT));
        varint(&mut out, step);
    }
    match what {
        // file_version: string, field 3.
        What::FileVersion => length_delimited(&mut out, 3, FILE_VERSION.as_bytes()),
        // session_log: SessionLog, field 7; its status (field 1) START is 1.
        What::Restart => length_delimited(&mut out, 7, &[key(1, VARINT), 1]),
        // summary: Summary, field 5; its values are field 1, each a tag (field 1) and a
        // simple_value (float, field 2).
        What::Scalars(scalars) => {
            let mut summary = Vec::new();
            for (tag, value) in scalars {
                let mut entry = Vec::new();
                length_delimited(&mut entry, 1, tag.as_bytes());
                entry.push(key(2, FIXED32));
                entry.extend_from_slice(&value.to_le_bytes());
                length_delimited(&mut summary, 1, &entry);
            }
            length_delimited(&mut out, 5, &summary);
        }
    }
    out
}

/// `data` framed as a TFRecord.
fn record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The CRC-32C of `bytes`, rotated and offset as TFRecords store it.
fn masked_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LENGTH_DELIMITED: u8 = 2;
const FIXED32: u8 = 5;

/// A field's key; every field here is numbered below 16, so the key is one byte.
fn key(field: u8, wire_type: u8) -> u8 {
    (field << 3) | wire_type
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn length_delimited(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    out.push(key(field, LENGTH_DELIMITED));
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records as the `tensorboard` package's own writer frames them
    /// (`EventFileWriter` with `event_pb2.Event`), for the same events.
    const FILE_VERSION_RECORD: &str = "1800000000000000a37f4b220900001040fc54d9411a0d627261696e2e\
                                       4576656e743a32338d2fe9";
    const RESTART_RECORD: &str = "0f000000000000006d532b0909000000000000004010073a020801d1715dcb";
    const SCALARS_RECORD: &str = "3200000000000000241956ec0900000000000059401080012a240a110a0a74\
                                  7261696e2f6c6f7373150000c03f0a0f0a08747261696e2f6c721501184f3a\
                                  7c4dca7a";

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn records_match_the_bytes_tensorboards_own_writer_gives() {
        let version = event_record(1_700_000_000.25, 0, What::FileVersion);
        assert_eq!(hex(&version), FILE_VERSION_RECORD);
        assert_eq!(hex(&event_record(2.0, 7, What::Restart)), RESTART_RECORD);
        let scalars = [
            ("train/loss".to_owned(), 1.5),
            ("train/lr".to_owned(), 7.9e-4),
        ];
        let record = event_record(100.0, 128, What::Scalars(&scalars));
        assert_eq!(hex(&record), SCALARS_RECORD);
    }
}
