//! GGUF metadata values: the thirteen value types and how each is stored.

use std::fmt;

use super::cursor::Cursor;

/// How deep arrays of arrays may nest; deeper is refused, so that a corrupt file cannot
/// exhaust the stack.
const MAX_NESTING: usize = 16;

/// The type of a metadata value, with its GGUF type id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `uint8` (id 0).
    U8,
    /// `int8` (id 1).
    I8,
    /// `uint16` (id 2).
    U16,
    /// `int16` (id 3).
    I16,
    /// `uint32` (id 4).
    U32,
    /// `int32` (id 5).
    I32,
    /// `float32` (id 6).
    F32,
    /// `bool`, one byte 0 or 1 (id 7).
    Bool,
    /// A UTF-8 string, its length a `u64` before it (id 8).
    String,
    /// An array: its items' type, a `u64` count, then the items (id 9).
    Array,
    /// `uint64` (id 10).
    U64,
    /// `int64` (id 11).
    I64,
    /// `float64` (id 12).
    F64,
}

impl ValueType {
    /// The type of GGUF type id `id`, if there is one.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// This type's GGUF type id.
    pub fn id(self) -> u32 {
        use ValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// The fewest bytes a value of this type takes in a file.
    fn min_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ValueType::*;
        f.write_str(match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        })
    }
}

/// A metadata value as the file stores it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `uint8`.
    U8(u8),
    /// `int8`.
    I8(i8),
    /// `uint16`.
    U16(u16),
    /// `int16`.
    I16(i16),
    /// `uint32`.
    U32(u32),
    /// `int32`.
    I32(i32),
    /// `uint64`.
    U64(u64),
    /// `int64`.
    I64(i64),
    /// `float32`.
    F32(f32),
    /// `float64`.
    F64(f64),
    /// `bool`.
    Bool(bool),
    /// A string.
    String(String),
    /// An array: its items' type (kept for an empty array) and its items, arrays themselves
    /// where the type is [`ValueType::Array`].
    Array(ValueType, Vec<Value>),
}

impl Value {
    /// This value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F32(_) => ValueType::F32,
            Value::F64(_) => ValueType::F64,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
        }
    }

    /// An integer of any type as `i128`, which holds them all; `None` for the other types.
    fn integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// An integer of any type that is not negative, as `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.integer().and_then(|v| u64::try_from(v).ok())
    }

    /// An integer of any type that fits an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.integer().and_then(|v| i64::try_from(v).ok())
    }

    /// A float of either width as `f64`, or an integer that `f64` holds exactly.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => {
                let v = self.integer()?;
                let float = v as f64;
                (float as i128 == v).then_some(float)
            }
        }
    }

    /// A bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(v) => Some(v),
            _ => None,
        }
    }

    /// An array's items.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(_, items) => Some(items),
            _ => None,
        }
    }
}

/// Scalars as Rust prints them (strings quoted), arrays as their first items in brackets.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v:?}"),
            Value::F64(v) => write!(f, "{v:?}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(v) => write!(f, "{v:?}"),
            Value::Array(_, items) => {
                const SHOWN: usize = 8;
                f.write_str("[")?;
                for (i, item) in items.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                if items.len() > SHOWN {
                    write!(f, ", ... ({} items)", items.len())?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Reads a value of type `ty` at the cursor; arrays are `depth` deep in others.
pub(super) fn read_value(
    cur: &mut Cursor<'_>,
    ty: ValueType,
    depth: usize,
) -> Result<Value, String> {
    Ok(match ty {
        ValueType::U8 => Value::U8(u8::from_le_bytes(cur.array()?)),
        ValueType::I8 => Value::I8(i8::from_le_bytes(cur.array()?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array()?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array()?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(cur.array()?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array()?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(cur.array()?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array()?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array()?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array()?)),
        ValueType::Bool => match cur.array::<1>()? {
            [0] => Value::Bool(false),
            [1] => Value::Bool(true),
            [byte] => return Err(format!("a bool of byte {byte} (only 0 and 1 are)")),
        },
        ValueType::String => Value::String(cur.string()?),
        ValueType::Array => {
            if depth >= MAX_NESTING {
                return Err(format!("arrays nested more than {MAX_NESTING} deep"));
            }
            let id = cur.u32()?;
            let item = ValueType::from_id(id)
                .ok_or_else(|| format!("an array of unknown value type id {id}"))?;
            let count = cur.u64()?;
            // Each item takes at least `min_size` bytes: a count the rest of the file cannot
            // hold is refused before anything is allocated for it.
            if count > (cur.remaining() / item.min_size()) as u64 {
                return Err(format!(
                    "an array of {count} {item} values, more than the {} bytes left hold",
                    cur.remaining()
                ));
            }
            let mut items = Vec::with_capacity(count as usize);
            for _ in 0..count {
                items.push(read_value(cur, item, depth + 1)?);
            }
            Value::Array(item, items)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_convert_across_types_when_they_fit() {
        assert_eq!(Value::U8(7).as_u64(), Some(7));
        assert_eq!(Value::I32(7).as_u64(), Some(7));
        assert_eq!(Value::I32(-7).as_u64(), None);
        assert_eq!(Value::I64(-7).as_i64(), Some(-7));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::U64(u64::MAX).as_u64(), Some(u64::MAX));
        assert_eq!(Value::F32(1.0).as_u64(), None);
        assert_eq!(Value::F32(0.1).as_f64(), Some(f64::from(0.1f32)));
        assert_eq!(Value::U32(10_000).as_f64(), Some(10_000.0));
        assert_eq!(Value::U64((1 << 53) + 1).as_f64(), None);
        assert_eq!(Value::Bool(true).as_u64(), None);
    }

    #[test]
    fn every_type_id_reads_back_as_its_type() {
        for id in 0..13 {
            let ty = ValueType::from_id(id).unwrap();
            assert_eq!(ty.id(), id);
        }
        assert_eq!(ValueType::from_id(13), None);
    }

    #[test]
    fn nesting_is_bounded() {
        // An array of one array of one array ... far deeper than allowed.
        let mut bytes = Vec::new();
        for _ in 0..100 {
            bytes.extend_from_slice(&9u32.to_le_bytes());
            bytes.extend_from_slice(&1u64.to_le_bytes());
        }
        let err = read_value(&mut Cursor::new(&bytes), ValueType::Array, 0).unwrap_err();
        assert!(err.contains("nested"), "{err}");
    }

    #[test]
    fn a_huge_count_is_refused_before_allocating() {
        let mut bytes = 8u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
        bytes.extend_from_slice(&[0; 64]);
        let err = read_value(&mut Cursor::new(&bytes), ValueType::Array, 0).unwrap_err();
        assert!(err.contains("more than the 64 bytes left hold"), "{err}");
    }
}
