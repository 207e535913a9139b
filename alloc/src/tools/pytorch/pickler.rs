//! Python's pickle, written: the opcodes of protocol 4 that plain dicts, lists, strings and
//! integers need, streamed as they are given. Strings are written once
//! and referred back to through the memo, as Python's pickler does, and so can any container
//! (a block's frames, shared by its events).

use std::collections::HashMap;
use std::io::{self, Write};

/// A pickle being written to `out`: open containers with [`begin_dict`](Self::begin_dict) or
/// [`begin_list`](Self::begin_list), give their items, close them with
/// [`end_dict`](Self::end_dict) or [`end_list`](Self::end_list), and end with
/// [`finish`](Self::finish). A dict's items are its keys and values in turn.
pub(crate) struct Pickler<W: Write> {
    out: W,
    /// The memo index of each string written so far.
    strings: HashMap<String, u32>,
    /// Memo entries made so far (the next one's index).
    memoized: u32,
}

impl<W: Write> Pickler<W> {
    /// A pickle of protocol 4 on `out`.
    pub(crate) fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&[0x80, 4])?; // PROTO 4
        Ok(Self {
            out,
            strings: HashMap::new(),
            memoized: 0,
        })
    }

    /// Writes an integer in the shortest opcode that holds it.
    pub(crate) fn int(&mut self, value: i128) -> io::Result<()> {
        match value {
            0..=0xff => self.out.write_all(&[b'K', value as u8]), // BININT1
            0x100..=0xffff => {
                self.out.write_all(b"M")?; // BININT2
                self.out.write_all(&(value as u16).to_le_bytes())
            }
            _ if i32::try_from(value).is_ok() => {
                self.out.write_all(b"J")?; // BININT
                self.out.write_all(&(value as i32).to_le_bytes())
            }
            _ => {
                // LONG1: the fewest little-endian bytes of two's complement that keep the sign.
                let bytes = value.to_le_bytes();
                let mut length = bytes.len();
                while length > 1 {
                    let (top, below) = (bytes[length - 1], bytes[length - 2]);
                    let redundant = (top == 0 && below < 0x80) || (top == 0xff && below >= 0x80);
                    if !redundant {
                        break;
                    }
                    length -= 1;
                }
                self.out.write_all(&[0x8a, length as u8])?;
                self.out.write_all(&bytes[..length])
            }
        }
    }

    /// Writes a string, or refers back to the same string written before.
    pub(crate) fn str(&mut self, value: &str) -> io::Result<()> {
        if let Some(&index) = self.strings.get(value) {
            return self.get(index);
        }
        let length = value.len();
        match u8::try_from(length) {
            Ok(short) => self.out.write_all(&[0x8c, short])?, // SHORT_BINUNICODE
            Err(_) => {
                let length = u32::try_from(length)
                    .map_err(|_| io::Error::other("a string of 4 GiB or more"))?;
                self.out.write_all(b"X")?; // BINUNICODE
                self.out.write_all(&length.to_le_bytes())?;
            }
        }
        self.out.write_all(value.as_bytes())?;
        let index = self.memoize()?;
        self.strings.insert(value.to_owned(), index);
        Ok(())
    }

    /// Opens a dict.
    pub(crate) fn begin_dict(&mut self) -> io::Result<()> {
        self.out.write_all(b"}(") // EMPTY_DICT, MARK
    }

    /// Closes the dict opened last, setting the keys and values given since.
    pub(crate) fn end_dict(&mut self) -> io::Result<()> {
        self.out.write_all(b"u") // SETITEMS
    }

    /// Opens a list.
    pub(crate) fn begin_list(&mut self) -> io::Result<()> {
        self.out.write_all(b"](") // EMPTY_LIST, MARK
    }

    /// Closes the list opened last, appending the items given since.
    pub(crate) fn end_list(&mut self) -> io::Result<()> {
        self.out.write_all(b"e") // APPENDS
    }

    /// Puts the value just written in the memo, and returns its index for [`get`](Self::get).
    pub(crate) fn memoize(&mut self) -> io::Result<u32> {
        self.out.write_all(&[0x94])?; // MEMOIZE
        self.memoized += 1;
        Ok(self.memoized - 1)
    }

    /// Writes the value memoized at `index` again: the same object, shared.
    pub(crate) fn get(&mut self, index: u32) -> io::Result<()> {
        match u8::try_from(index) {
            Ok(short) => self.out.write_all(&[b'h', short]), // BINGET
            Err(_) => {
                self.out.write_all(b"j")?; // LONG_BINGET
                self.out.write_all(&index.to_le_bytes())
            }
        }
    }

    /// Ends the pickle and hands its writer back.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.out.write_all(b".")?; // STOP
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::pickle::{self, Value};
    use super::*;

    /// `(bytes, the value read back)` of what `write` pickles.
    fn round_trip(write: impl FnOnce(&mut Pickler<Vec<u8>>) -> io::Result<()>) -> Value {
        let mut pickler = Pickler::new(Vec::new()).unwrap();
        write(&mut pickler).unwrap();
        let bytes = pickler.finish().unwrap();
        pickle::read(&bytes).unwrap()
    }

    #[test]
    fn integers_of_every_width_read_back() {
        for value in [
            0i128,
            255,
            256,
            65_535,
            65_536,
            -1,
            i32::MIN as i128,
            i32::MAX as i128 + 1,
            0x7fff_ffff_ffff,
            -0x8000_0000_0001,
            i64::MAX as i128,
        ] {
            let read = round_trip(|p| p.int(value));
            assert!(
                matches!(read, Value::Int(i) if i as i128 == value),
                "{value} read as {read:?}"
            );
        }
    }

    #[test]
    fn dicts_lists_and_shared_strings_read_back() {
        let value = round_trip(|p| {
            p.begin_dict()?;
            p.str("events")?;
            p.begin_list()?;
            for i in 0..300 {
                // Past 256 memo entries, strings are referred to by LONG_BINGET.
                p.str(&format!("s{}", i % 280))?;
            }
            p.end_list()?;
            p.str("long")?;
            p.str(&"x".repeat(300))?;
            p.end_dict()
        });
        let events = value.get("events").unwrap().items().unwrap();
        assert_eq!(events.len(), 300);
        assert_eq!(&*events[285].as_str().unwrap(), "s5");
        assert_eq!(value.get("long").unwrap().as_str().unwrap().len(), 300);
    }

    #[test]
    fn a_memoized_list_is_shared() {
        let value = round_trip(|p| {
            p.begin_list()?;
            p.begin_list()?;
            p.int(7)?;
            p.end_list()?;
            let frames = p.memoize()?;
            p.get(frames)?;
            p.end_list()
        });
        let items = value.items().unwrap();
        let (Value::List(a), Value::List(b)) = (&items[0], &items[1]) else {
            panic!("two lists expected, read {items:?}");
        };
        assert!(std::rc::Rc::ptr_eq(a, b));
    }
}
