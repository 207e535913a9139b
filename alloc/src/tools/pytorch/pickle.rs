//! Python's pickle, as far as a memory snapshot needs: the opcodes of protocols 2 to 5 that
//! plain dicts, lists, tuples, strings, bytes, integers, floats, booleans and `None` use, with
//! their memo (booleans, floats and bytes are read past). Objects are shared as Python shares them (a free event's frames are its block's
//! list), so containers are reference-counted; a pickled class instance is refused.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// A list's items, shared as Python shares the list.
type Items = Rc<RefCell<Vec<Value>>>;

/// A dict's pairs, in the order they were set, shared as Python shares the dict.
type Pairs = Rc<RefCell<Vec<(Value, Value)>>>;

/// A value of the pickle.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    None,
    /// A boolean, a float or bytes: read past, as a snapshot reads none of them.
    Other,
    Int(i64),
    Str(Rc<str>),
    /// A list or a tuple.
    List(Items),
    Dict(Pairs),
}

impl Value {
    fn list(items: Vec<Value>) -> Self {
        Value::List(Rc::new(RefCell::new(items)))
    }

    /// The value of `key` in a dict with string keys.
    pub(crate) fn get(&self, key: &str) -> Option<Value> {
        let Value::Dict(items) = self else {
            return None;
        };
        let items = items.borrow();
        let found = items
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key));
        found.map(|(_, v)| v.clone())
    }

    /// The items of a list or tuple.
    pub(crate) fn items(&self) -> Option<Vec<Value>> {
        match self {
            Value::List(items) => Some(items.borrow().clone()),
            _ => None,
        }
    }

    /// A non-negative integer.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    /// A string.
    pub(crate) fn as_str(&self) -> Option<Rc<str>> {
        match self {
            Value::Str(s) => Some(Rc::clone(s)),
            _ => None,
        }
    }
}

/// An item of the machine's stack: a value, or the mark that opens a group of them.
enum Item {
    Mark,
    Value(Value),
}

/// Reads the value pickled in `bytes`, or says why it cannot.
pub(crate) fn read(bytes: &[u8]) -> Result<Value, String> {
    let mut machine = Machine {
        bytes,
        at: 0,
        stack: Vec::new(),
        memo: Vec::new(),
        sparse: HashMap::new(),
    };
    machine.run()
}

struct Machine<'a> {
    bytes: &'a [u8],
    at: usize,
    stack: Vec<Item>,
    /// The memo's entries 0, 1, 2, ... as a pickler numbers them.
    memo: Vec<Value>,
    /// Entries stored past the end of `memo` (Python's memo is a dictionary, so a file may
    /// number them as it likes): kept apart, so that a corrupt index takes no memory.
    sparse: HashMap<usize, Value>,
}

impl Machine<'_> {
    fn run(&mut self) -> Result<Value, String> {
        loop {
            let at = self.at;
            let op = self.take(1)?[0];
            match op {
                0x80 => drop(self.take(1)?),            // PROTO
                0x95 => drop(self.take(8)?),            // FRAME
                b'.' => return self.pop_value(),        // STOP
                b'(' => self.stack.push(Item::Mark),    // MARK
                b'N' => self.push(Value::None),         // NONE
                0x88 | 0x89 => self.push(Value::Other), // NEWTRUE, NEWFALSE
                b'K' => {
                    let n = self.take(1)?[0];
                    self.push(Value::Int(n.into())) // BININT1
                }
                b'M' => {
                    let n = u16::from_le_bytes(self.array()?);
                    self.push(Value::Int(n.into())) // BININT2
                }
                b'J' => {
                    let n = i32::from_le_bytes(self.array()?);
                    self.push(Value::Int(n as i64)) // BININT
                }
                0x8a => {
                    let len = self.take(1)?[0] as usize;
                    let n = long(self.take(len)?)?;
                    self.push(Value::Int(n)) // LONG1
                }
                0x8b => {
                    let len = u32::from_le_bytes(self.array()?) as usize;
                    let n = long(self.take(len)?)?;
                    self.push(Value::Int(n)) // LONG4
                }
                b'G' => {
                    self.take(8)?;
                    self.push(Value::Other) // BINFLOAT
                }
                0x8c => {
                    let len = self.take(1)?[0] as usize;
                    self.text(len)? // SHORT_BINUNICODE
                }
                b'X' => {
                    let len = u32::from_le_bytes(self.array()?) as usize;
                    self.text(len)? // BINUNICODE
                }
                0x8d => {
                    let len = self.length8()?;
                    self.text(len)? // BINUNICODE8
                }
                b'C' => {
                    let len = self.take(1)?[0] as usize;
                    self.data(len)? // SHORT_BINBYTES
                }
                b'B' => {
                    let len = u32::from_le_bytes(self.array()?) as usize;
                    self.data(len)? // BINBYTES
                }
                0x8e => {
                    let len = self.length8()?;
                    self.data(len)? // BINBYTES8
                }
                b'}' => self.push(Value::Dict(Rc::default())), // EMPTY_DICT
                b']' => self.push(Value::list(Vec::new())),    // EMPTY_LIST
                b')' => self.push(Value::list(Vec::new())),    // EMPTY_TUPLE
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Value::list(items)) // TUPLE
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    let mut items = (0..n)
                        .map(|_| self.pop_value())
                        .collect::<Result<Vec<_>, _>>()?;
                    items.reverse();
                    self.push(Value::list(items)) // TUPLE1, TUPLE2, TUPLE3
                }
                b'a' => {
                    let item = self.pop_value()?;
                    self.list_top()?.borrow_mut().push(item) // APPEND
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.list_top()?.borrow_mut().extend(items) // APPENDS
                }
                b's' => {
                    let value = self.pop_value()?;
                    let key = self.pop_value()?;
                    self.dict_top()?.borrow_mut().push((key, value)) // SETITEM
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err(format!("byte {at}: SETITEMS with an odd number of items"));
                    }
                    let mut pairs = items.into_iter();
                    let dict = self.dict_top()?;
                    let mut dict = dict.borrow_mut();
                    while let (Some(k), Some(v)) = (pairs.next(), pairs.next()) {
                        dict.push((k, v)) // SETITEMS
                    }
                }
                0x94 => self.put(self.memo.len() + self.sparse.len())?, // MEMOIZE
                b'q' => {
                    let id = self.take(1)?[0] as usize;
                    self.put(id)? // BINPUT
                }
                b'r' => {
                    let id = u32::from_le_bytes(self.array()?) as usize;
                    self.put(id)? // LONG_BINPUT
                }
                b'h' => {
                    let id = self.take(1)?[0] as usize;
                    self.get(id, at)? // BINGET
                }
                b'j' => {
                    let id = u32::from_le_bytes(self.array()?) as usize;
                    self.get(id, at)? // LONG_BINGET
                }
                b'c' | 0x93 | b'R' | b'b' | 0x81 | 0x92 => {
                    return Err(format!(
                        "byte {at}: a pickled object of a class (opcode {op:#04x}), where a \
                         snapshot holds plain values"
                    ));
                }
                _ => {
                    return Err(format!(
                        "byte {at}: pickle opcode {op:#04x} is not supported"
                    ));
                }
            }
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(format!(
                "truncated: {n} bytes needed at byte {} of {}",
                self.at,
                self.bytes.len()
            ));
        };
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn length8(&mut self) -> Result<usize, String> {
        usize::try_from(u64::from_le_bytes(self.array()?)).map_err(|e| e.to_string())
    }

    fn text(&mut self, len: usize) -> Result<(), String> {
        let at = self.at;
        let text = std::str::from_utf8(self.take(len)?)
            .map_err(|e| format!("byte {at}: a string that is not UTF-8: {e}"))?;
        let value = Value::Str(Rc::from(text));
        self.push(value);
        Ok(())
    }

    fn data(&mut self, len: usize) -> Result<(), String> {
        self.take(len)?;
        self.push(Value::Other);
        Ok(())
    }

    fn push(&mut self, value: Value) {
        self.stack.push(Item::Value(value));
    }

    fn peek(&self) -> Result<Value, String> {
        match self.stack.last() {
            Some(Item::Value(v)) => Ok(v.clone()),
            _ => Err(format!("byte {}: no value on the stack", self.at)),
        }
    }

    fn pop_value(&mut self) -> Result<Value, String> {
        match self.stack.pop() {
            Some(Item::Value(v)) => Ok(v),
            _ => Err(format!("byte {}: no value on the stack", self.at)),
        }
    }

    /// The values pushed since the last mark, which goes.
    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let mut items = Vec::new();
        loop {
            match self.stack.pop() {
                Some(Item::Value(v)) => items.push(v),
                Some(Item::Mark) => break,
                None => return Err(format!("byte {}: no mark on the stack", self.at)),
            }
        }
        items.reverse();
        Ok(items)
    }

    fn list_top(&self) -> Result<Items, String> {
        match self.peek()? {
            Value::List(items) => Ok(items),
            _ => Err(format!("byte {}: appending to what is not a list", self.at)),
        }
    }

    fn dict_top(&self) -> Result<Pairs, String> {
        match self.peek()? {
            Value::Dict(items) => Ok(items),
            _ => Err(format!(
                "byte {}: setting an item of what is not a dict",
                self.at
            )),
        }
    }

    fn put(&mut self, id: usize) -> Result<(), String> {
        let top = self.peek()?;
        match id.cmp(&self.memo.len()) {
            std::cmp::Ordering::Less => self.memo[id] = top,
            std::cmp::Ordering::Equal => self.memo.push(top),
            std::cmp::Ordering::Greater => drop(self.sparse.insert(id, top)),
        }
        Ok(())
    }

    fn get(&mut self, id: usize, at: usize) -> Result<(), String> {
        let value = self.memo.get(id).or_else(|| self.sparse.get(&id)).cloned();
        let value = value.ok_or_else(|| format!("byte {at}: memo entry {id} was never stored"))?;
        self.push(value);
        Ok(())
    }
}

/// A little-endian two's-complement integer that fits 64 bits (its bytes past the eighth, if
/// any, only extend its sign).
fn long(bytes: &[u8]) -> Result<i64, String> {
    let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
    let fill = if negative { 0xff } else { 0 };
    let (low, high) = bytes.split_at(bytes.len().min(8));
    let mut full = [fill; 8];
    full[..low.len()].copy_from_slice(low);
    let n = i64::from_le_bytes(full);
    if high.iter().any(|&b| b != fill) || (n < 0) != negative {
        return Err(format!(
            "an integer of {} bytes, beyond 64 bits",
            bytes.len()
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_lists_are_read_as_python_shares_them() {
        // pickle.dumps([{'f': a}, {'f': a}, {'f': a}], protocol=4) with a = [{'n': 'x'}]
        let bytes = b"\x80\x04\x95(\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94\x8c\x01f\x94]\x94}\x94\x8c\x01n\x94\x8c\x01x\x94sas}\x94h\x02h\x03s}\x94h\x02h\x03se.";
        let value = read(bytes).unwrap();
        let items = value.items().unwrap();
        assert_eq!(items.len(), 3);
        for item in &items {
            let f = item.get("f").unwrap().items().unwrap();
            assert_eq!(&*f[0].get("n").unwrap().as_str().unwrap(), "x");
        }
    }

    #[test]
    fn a_memo_index_far_past_the_entries_takes_no_memory_and_still_reads_back() {
        // An empty dictionary stored at memo index 4 294 967 280 (LONG_BINPUT), read back
        // (LONG_BINGET) into a list: a corrupt file once made the reader ask for 56 GB here.
        let bytes = b"\x80\x02]}r\xf0\xff\xff\xffaj\xf0\xff\xff\xffa.";
        let items = read(bytes).unwrap().items().unwrap();
        assert_eq!(items.len(), 2);
        let err = read(b"\x80\x02]j\xf0\xff\xff\xffa.").unwrap_err();
        assert!(
            err.contains("memo entry 4294967280 was never stored"),
            "{err}"
        );
    }

    #[test]
    fn integers_of_every_width_read_back() {
        // pickle.dumps([1, 300, -5, 94255544078336, 2**63 - 1], protocol=2)
        let bytes = b"\x80\x02]q\x00(K\x01M,\x01J\xfb\xff\xff\xff\x8a\x06\x00\x109\x94\xb9U\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7fe.";
        let items = read(bytes).unwrap().items().unwrap();
        let ints: Vec<i64> = items
            .iter()
            .map(|v| match v {
                Value::Int(i) => *i,
                _ => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(ints, [1, 300, -5, 94_255_544_078_336, i64::MAX]);
    }

    #[test]
    fn floats_none_booleans_bytes_and_tuples_are_read() {
        // pickle.dumps([1.5, None, True, False, b'ab', ('t', 1)], protocol=5)
        let bytes = b"\x80\x05\x95\x1e\x00\x00\x00\x00\x00\x00\x00]\x94(G?\xf8\x00\x00\x00\x00\x00\x00N\x88\x89C\x02ab\x94\x8c\x01t\x94K\x01\x86\x94e.";
        let items = read(bytes).unwrap().items().unwrap();
        assert!(matches!(items[0], Value::Other) && matches!(items[1], Value::None));
        assert!(matches!(
            items[2..5],
            [Value::Other, Value::Other, Value::Other]
        ));
        let pair = items[5].items().unwrap();
        assert_eq!(&*pair[0].as_str().unwrap(), "t");
        assert_eq!(pair[1].as_u64(), Some(1));
    }

    #[test]
    fn truncated_and_foreign_pickles_are_errors() {
        assert!(read(b"\x80\x04]").unwrap_err().contains("truncated"));
        let class = b"\x80\x02cbuiltins\nobject\nq\x00.";
        assert!(read(class).unwrap_err().contains("class"));
    }
}
