//! A reader of TensorBoard event files, written from the format alone: it checks every record's
//! CRC-32C and reads the events' fields, and it reads a run directory's files as TensorBoard
//! does (in name order, a restart marker dropping what earlier files hold from its step on).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One event, the fields a run writes.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Event {
    pub wall_time: f64,
    pub step: u64,
    pub file_version: Option<String>,
    /// A `SessionLog` with status `START`.
    pub restart: bool,
    pub scalars: Vec<(String, f32)>,
}

/// The event files of `dir`, in the order TensorBoard reads them.
pub fn event_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .contains("tfevents")
        })
        .collect();
    files.sort();
    files
}

/// Every event of the file at `path`, each record's two CRCs checked. A last record cut short
/// (its process killed while writing it) is passed over, as TensorBoard passes it over; the
/// second value says whether there was one.
pub fn read_events(path: &Path) -> (Vec<Event>, bool) {
    let bytes = std::fs::read(path).unwrap();
    let (mut events, mut at) = (Vec::new(), 0);
    while at < bytes.len() {
        let rest = &bytes[at..];
        if rest.len() < 12 {
            return (events, true);
        }
        let length = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
        let length_crc = u32::from_le_bytes(rest[8..12].try_into().unwrap());
        assert_eq!(
            length_crc,
            masked_crc(&rest[..8]),
            "{}: byte {at}",
            path.display()
        );
        if rest.len() < 12 + length + 4 {
            return (events, true);
        }
        let data = &rest[12..12 + length];
        let data_crc = u32::from_le_bytes(rest[12 + length..16 + length].try_into().unwrap());
        assert_eq!(data_crc, masked_crc(data), "{}: byte {at}", path.display());
        events.push(parse_event(data));
        at += 16 + length;
    }
    (events, false)
}

/// The scalars of `dir` by tag, with their steps, as TensorBoard shows them: each file read in
/// order after checking that it starts with its version, a restart marker at step `s` dropping
/// every value read before at `s` or later.
pub fn scalars_by_tag(dir: &Path) -> BTreeMap<String, Vec<(u64, f32)>> {
    let mut tags: BTreeMap<String, Vec<(u64, f32)>> = BTreeMap::new();
    for file in event_files(dir) {
        let (events, _) = read_events(&file);
        if let Some(first) = events.first() {
            assert_eq!(first.file_version.as_deref(), Some("brain.Event:2"));
        }
        for event in events {
            if event.restart {
                for values in tags.values_mut() {
                    values.retain(|&(step, _)| step < event.step);
                }
            }
            for (tag, value) in event.scalars {
                tags.entry(tag).or_default().push((event.step, value));
            }
        }
    }
    tags.retain(|_, values| !values.is_empty());
    tags
}

/// CRC-32C, bit by bit, rotated and offset as TFRecords store it.
fn masked_crc(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    (!crc).rotate_right(15).wrapping_add(0xA282_EAD8)
}

/// The protocol buffer fields of `data`: (field number, value).
fn fields(mut data: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let key = varint(&mut data);
        let value = match key & 7 {
            0 => Field::Varint(varint(&mut data)),
            1 => {
                let (value, rest) = data.split_at(8);
                data = rest;
                Field::Fixed64(u64::from_le_bytes(value.try_into().unwrap()))
            }
            2 => {
                let length = varint(&mut data) as usize;
                let (value, rest) = data.split_at(length);
                data = rest;
                Field::Bytes(value)
            }
            5 => {
                let (value, rest) = data.split_at(4);
                data = rest;
                Field::Fixed32(u32::from_le_bytes(value.try_into().unwrap()))
            }
            other => panic!("wire type {other}"),
        };
        out.push((key >> 3, value));
    }
    out
}

#[derive(Debug, Clone, Copy)]
enum Field<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

fn varint(data: &mut &[u8]) -> u64 {
    let mut value = 0;
    for shift in (0..64).step_by(7) {
        let byte = data[0];
        *data = &data[1..];
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            break;
        }
    }
    value
}

fn parse_event(data: &[u8]) -> Event {
    let mut event = Event::default();
    for (number, field) in fields(data) {
        match (number, field) {
            (1, Field::Fixed64(bits)) => event.wall_time = f64::from_bits(bits),
            (2, Field::Varint(step)) => event.step = step,
            (3, Field::Bytes(text)) => {
                event.file_version = Some(String::from_utf8(text.to_vec()).unwrap())
            }
            (5, Field::Bytes(summary)) => {
                for (_, value) in fields(summary) {
                    let Field::Bytes(value) = value else {
                        panic!("a value: {value:?}")
                    };
                    let (mut tag, mut scalar) = (None, None);
                    for (number, field) in fields(value) {
                        match (number, field) {
                            (1, Field::Bytes(t)) => {
                                tag = Some(String::from_utf8(t.to_vec()).unwrap())
                            }
                            (2, Field::Fixed32(bits)) => scalar = Some(f32::from_bits(bits)),
                            other => panic!("a value's field {other:?}"),
                        }
                    }
                    event.scalars.push((tag.unwrap(), scalar.unwrap()));
                }
            }
            (7, Field::Bytes(log)) => {
                event.restart = matches!(fields(log).as_slice(), [(1, Field::Varint(1))]);
            }
            other => panic!("an event's field {other:?}"),
        }
    }
    event
}
