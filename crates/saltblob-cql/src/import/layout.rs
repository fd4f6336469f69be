//! [`ArticleLayout`]: the geometry of one article blob, from its layout row.

use scylla::value::CqlValue;

use super::values::{as_i64, int_value};

/// The geometry of one article blob, from its layout row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArticleLayout {
    /// Chunks of the value: 0 for an empty value.
    pub total_chunks: i64,
    /// Partitions the chunks are spread over: chunk `i` lives in salt `i % salt_cardinality`.
    pub salt_cardinality: i64,
}

impl ArticleLayout {
    /// The layout in `row`'s `total_chunks` and `salt_cardinality`, or why it is not one: a missing value,
    /// not an integer, `total_chunks` below 0 or `salt_cardinality` below 1.
    pub fn from_row(
        total_chunks: Option<&CqlValue>,
        salt_cardinality: Option<&CqlValue>,
    ) -> std::result::Result<Self, String> {
        let (Some(total), Some(cardinality)) = (total_chunks, salt_cardinality) else {
            return Err(
                "no layout row (salt 0, chunk_id 0 with total_chunks and salt_cardinality)".into(),
            );
        };
        let (Some(total), Some(cardinality)) = (as_i64(total), as_i64(cardinality)) else {
            return Err("total_chunks or salt_cardinality is not an integer".into());
        };
        if total < 0 || cardinality < 1 {
            return Err(format!(
                "invalid layout: total_chunks {total}, salt_cardinality {cardinality}"
            ));
        }
        Ok(Self {
            total_chunks: total,
            salt_cardinality: cardinality,
        })
    }

    /// Chunk rows of the blob: chunk ids `0..rows`. An empty value has one (empty) row.
    pub fn rows(&self) -> i64 {
        self.total_chunks.max(1)
    }

    /// Salts that hold rows: `0..salts_in_use`.
    pub fn salts_in_use(&self) -> i64 {
        self.salt_cardinality.min(self.rows())
    }

    /// Why the blob's largest salt or chunk id does not fit the columns' integer types, if it does not.
    pub(super) fn fits(
        &self,
        salt_type: &str,
        chunk_id_type: &str,
    ) -> std::result::Result<(), String> {
        let fits = |column: &str, ty: &str, largest: i64| {
            int_value(ty, largest).map(|_| ()).map_err(|_| {
                format!(
                    "invalid layout: total_chunks {}, salt_cardinality {}: its largest {column} {largest} does \
                     not fit the column's type {ty}",
                    self.total_chunks, self.salt_cardinality
                )
            })
        };
        fits("salt", salt_type, self.salts_in_use() - 1)?;
        fits("chunk_id", chunk_id_type, self.rows() - 1)
    }

    /// Checks chunk `index` of `len` bytes: an empty value's one row must be empty.
    pub fn check_chunk(&self, index: i64, len: usize) -> std::result::Result<(), String> {
        if self.total_chunks == 0 && len > 0 {
            return Err(format!(
                "total_chunks is 0 but chunk {index} holds {len} bytes"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_rows_are_checked() {
        let int = |v: i32| CqlValue::Int(v);
        for (total, cardinality, expect) in [
            (None, Some(int(1)), "no layout row"),
            (Some(int(1)), None, "no layout row"),
            (
                Some(CqlValue::Text("1".into())),
                Some(int(1)),
                "not an integer",
            ),
            (
                Some(int(-1)),
                Some(int(1)),
                "invalid layout: total_chunks -1",
            ),
            (Some(int(3)), Some(int(0)), "salt_cardinality 0"),
        ] {
            let err =
                ArticleLayout::from_row(total.as_ref(), cardinality.as_ref()).expect_err(expect);
            assert!(err.contains(expect), "{err}");
        }
        let layout = |total_chunks, salt_cardinality| ArticleLayout {
            total_chunks,
            salt_cardinality,
        };
        let huge = layout(1 << 40, 1 << 40);
        assert!(huge.fits("bigint", "bigint").is_ok());
        let err = huge
            .fits("int", "bigint")
            .expect_err("salt too large for int");
        assert!(err.contains("largest salt 1099511627775"), "{err}");
        assert!(layout(1 << 40, 3).fits("int", "int").is_err());
        assert!(layout(0, i64::MAX).fits("tinyint", "tinyint").is_ok());
    }
}
