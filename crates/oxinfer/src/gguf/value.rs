//! GGUF metadata values: the twelve scalar types, strings and (nested) arrays.

/// One metadata value as stored in a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(MetaArray),
}

/// A typed GGUF array. Arrays of arrays are allowed by the format.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Array(Vec<MetaArray>),
}

impl MetaArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as an integer, for any integer or bool element type.
    pub fn int_at(&self, i: usize) -> Option<i64> {
        Some(match self {
            MetaArray::U8(v) => i64::from(*v.get(i)?),
            MetaArray::I8(v) => i64::from(*v.get(i)?),
            MetaArray::U16(v) => i64::from(*v.get(i)?),
            MetaArray::I16(v) => i64::from(*v.get(i)?),
            MetaArray::U32(v) => i64::from(*v.get(i)?),
            MetaArray::I32(v) => i64::from(*v.get(i)?),
            MetaArray::U64(v) => i64::try_from(*v.get(i)?).ok()?,
            MetaArray::I64(v) => *v.get(i)?,
            MetaArray::Bool(v) => i64::from(*v.get(i)?),
            _ => return None,
        })
    }

    /// All elements as integers (any integer element type), or `None` for other types.
    pub fn to_ints(&self) -> Option<Vec<i64>> {
        (0..self.len()).map(|i| self.int_at(i)).collect()
    }

    /// All elements as `f32` (any numeric element type), or `None` for other types.
    pub fn to_f32s(&self) -> Option<Vec<f32>> {
        match self {
            MetaArray::F32(v) => Some(v.clone()),
            MetaArray::F64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            other => other
                .to_ints()
                .map(|v| v.into_iter().map(|x| x as f32).collect()),
        }
    }
}

impl MetaValue {
    /// GGUF's name of the value's type (for error messages).
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::F32(_) => "f32",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F64(_) => "f64",
            MetaValue::Array(_) => "array",
        }
    }

    /// The value as an unsigned integer, converting from any integer type that fits.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, converting from any integer type that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::U64(v) => i64::try_from(v).ok(),
            MetaValue::I64(v) => Some(v),
            _ => self.as_u64().map(|v| v as i64).or(match *self {
                MetaValue::I8(v) => Some(v.into()),
                MetaValue::I16(v) => Some(v.into()),
                MetaValue::I32(v) => Some(v.into()),
                _ => None,
            }),
        }
    }

    /// The value as a float, converting from any numeric type.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The value as a bool (integers 0/1 are accepted too).
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(v) => Some(v),
            _ => match self.as_u64()? {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            },
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value as an array of strings.
    pub fn as_strings(&self) -> Option<&[String]> {
        match self {
            MetaValue::Array(MetaArray::String(v)) => Some(v),
            _ => None,
        }
    }
}

impl std::fmt::Display for MetaValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaValue::U8(v) => write!(f, "{v}"),
            MetaValue::I8(v) => write!(f, "{v}"),
            MetaValue::U16(v) => write!(f, "{v}"),
            MetaValue::I16(v) => write!(f, "{v}"),
            MetaValue::U32(v) => write!(f, "{v}"),
            MetaValue::I32(v) => write!(f, "{v}"),
            MetaValue::F32(v) => write!(f, "{v}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::String(v) => write!(f, "{v:?}"),
            MetaValue::U64(v) => write!(f, "{v}"),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v}"),
            MetaValue::Array(a) => write!(f, "[{} elements]", a.len()),
        }
    }
}
