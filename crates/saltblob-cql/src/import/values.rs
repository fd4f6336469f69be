//! The article's CQL values: keys as saltblob keys, and integer columns of any CQL integer type.

use bytes::Bytes;
use saltblob_core::{Error, Result};
use scylla::value::CqlValue;

use crate::error;

/// The saltblob key of an article key: the bytes of a blob, the UTF-8 of a text.
pub(super) fn key_bytes(key: &CqlValue) -> Result<Bytes> {
    match key {
        CqlValue::Blob(b) => Ok(Bytes::copy_from_slice(b)),
        CqlValue::Text(s) | CqlValue::Ascii(s) => Ok(Bytes::copy_from_slice(s.as_bytes())),
        CqlValue::Int(i) => Ok(Bytes::from(i.to_string())),
        CqlValue::BigInt(i) => Ok(Bytes::from(i.to_string())),
        CqlValue::Uuid(u) => Ok(Bytes::from(u.to_string())),
        other => Err(error::malformed(
            "key",
            format!("unsupported key type {other:?}; use text, blob, int, bigint or uuid"),
        )),
    }
}

/// `v` as an `i64`, if it is of a CQL integer type.
pub(super) fn as_i64(v: &CqlValue) -> Option<i64> {
    match v {
        CqlValue::Int(i) => Some(i64::from(*i)),
        CqlValue::BigInt(i) => Some(*i),
        CqlValue::SmallInt(i) => Some(i64::from(*i)),
        CqlValue::TinyInt(i) => Some(i64::from(*i)),
        _ => None,
    }
}

/// `v` as a value of the CQL integer type `ty`.
pub(super) fn int_value(ty: &str, v: i64) -> Result<CqlValue> {
    let overflow = || Error::invalid("chunk id", format!("{v} does not fit the column type {ty}"));
    Ok(match ty {
        "int" => CqlValue::Int(i32::try_from(v).map_err(|_| overflow())?),
        "bigint" => CqlValue::BigInt(v),
        "smallint" => CqlValue::SmallInt(i16::try_from(v).map_err(|_| overflow())?),
        "tinyint" => CqlValue::TinyInt(i8::try_from(v).map_err(|_| overflow())?),
        other => {
            return Err(error::malformed(
                "source table",
                format!("integer column of unsupported type {other}"),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn integer_columns_take_their_own_type() {
        assert_eq!(int_value("int", 5).ok(), Some(CqlValue::Int(5)));
        assert_eq!(int_value("bigint", 5).ok(), Some(CqlValue::BigInt(5)));
        assert!(int_value("smallint", 70_000).is_err());
        assert!(int_value("text", 1).is_err());
        assert_eq!(as_i64(&CqlValue::TinyInt(3)), Some(3));
        assert_eq!(
            key_bytes(&CqlValue::Text("k".into())).ok(),
            Some(Bytes::from_static(b"k"))
        );
    }

    proptest! {
        /// A blob key, whatever its bytes, is imported under those bytes.
        #[test]
        fn blob_keys_are_their_bytes(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(key_bytes(&CqlValue::Blob(key.clone())).ok(), Some(Bytes::from(key)));
        }
    }
}
