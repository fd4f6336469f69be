"""Real consumers of ``saltblob://``: pandas (parquet and CSV, read and written by URL), ``pyarrow.dataset`` over a
partitioned dataset whose filters read only the row groups they need (the bytes fetched are counted), and dask
reading a dataset. On a RocksDB store and on the Cassandra node (``TEST_CQL``)."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import saltblob
from saltblob.fsspec import SaltblobFile, SaltblobFileSystem


@pytest.fixture
def opts(store: saltblob.Store) -> Iterator[Dict[str, Any]]:
    """The storage options that name the test's store."""
    url, options = store.__reduce__()[1]
    yield {"store": url, **options}
    SaltblobFileSystem.clear_instance_cache()


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> List[Tuple[str, int, int]]:
    """Every range the files of ``saltblob://`` fetch from the store, as (path, start, end)."""
    ranges: List[Tuple[str, int, int]] = []
    read = SaltblobFile._read

    def counting(self: SaltblobFile, start: int, end: int) -> bytes:
        ranges.append((self.path, start, end))
        return read(self, start, end)

    monkeypatch.setattr(SaltblobFile, "_read", counting)
    return ranges


def frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame({
        "id": np.arange(n, dtype=np.int64),
        "year": 2020 + (np.arange(n) % 4),
        "value": rng.random(n),
        "label": [f"row-{i}" for i in range(n)],
    })


def test_pandas_parquet_and_csv(opts: Dict[str, Any], ns: str) -> None:
    df = frame(20_000)
    df.to_parquet(f"saltblob://{ns}t.parquet", storage_options=opts)
    back = pd.read_parquet(f"saltblob://{ns}t.parquet", storage_options=opts)
    pd.testing.assert_frame_equal(back, df)
    cols = pd.read_parquet(f"saltblob://{ns}t.parquet", columns=["id", "label"], storage_options=opts)
    pd.testing.assert_frame_equal(cols, df[["id", "label"]])
    df.to_csv(f"saltblob://{ns}t.csv.gz", index=False, storage_options=opts)
    csv = pd.read_csv(f"saltblob://{ns}t.csv.gz", storage_options=opts)
    pd.testing.assert_frame_equal(csv, df)
    fs = SaltblobFileSystem(**opts)
    assert fs.info(f"{ns}t.csv.gz")["size"] < fs.info(f"{ns}t.parquet")["size"] * 4


def test_a_parquet_footer_is_one_fetch(
    opts: Dict[str, Any], ns: str, fetched: List[Tuple[str, int, int]]
) -> None:
    fs = SaltblobFileSystem(**opts)
    pq.write_table(pa.Table.from_pandas(frame(50_000)), f"{ns}f.parquet", filesystem=fs, row_group_size=5_000)
    size = fs.size(f"{ns}f.parquet")
    fetched.clear()
    meta = pq.ParquetFile(f"{ns}f.parquet", filesystem=fs).metadata
    assert meta.num_row_groups == 10
    assert len(fetched) == 1 and fetched[0][2] == size


def extents(fs: SaltblobFileSystem, path: str, columns: List[str], keep: Any) -> List[Tuple[int, int]]:
    """The byte ranges of file PATH a reader of COLUMNS needs: the column chunks of the row groups KEEP(metadata of
    the row group) selects, and the footer."""
    f = pq.ParquetFile(path, filesystem=fs)
    meta, size = f.metadata, fs.size(path)
    out = [(size - 8 - meta.serialized_size, size)]
    for r in range(meta.num_row_groups):
        rg = meta.row_group(r)
        if not keep(rg):
            continue
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.path_in_schema in columns:
                start = col.dictionary_page_offset or col.data_page_offset
                out.append((start, start + col.total_compressed_size))
    return out


def test_pyarrow_dataset_reads_only_the_row_groups_it_needs(
    opts: Dict[str, Any], ns: str, fetched: List[Tuple[str, int, int]]
) -> None:
    fs = SaltblobFileSystem(**opts)
    table = pa.Table.from_pandas(frame(400_000), preserve_index=False)
    root = f"{ns}ds"
    ds.write_dataset(
        table, root, filesystem=fs, format="parquet", partitioning=["year"], partitioning_flavor="hive",
        min_rows_per_group=25_000, max_rows_per_group=25_000,
        # In input order: the row-group statistics below assume each file's ids ascend (a threaded writer may
        # interleave batches, and did once on a loaded machine).
        use_threads=False,
    )
    files = sorted(fs.find(root))
    assert len(files) == 4 and all("year=" in f for f in files)
    total = sum(fs.size(f) for f in files)

    def scan(flt: Any, columns: List[str]) -> Tuple[pa.Table, List[Tuple[str, int, int]]]:
        fetched.clear()
        got = ds.dataset(root, filesystem=fs, format="parquet", partitioning="hive").to_table(
            filter=flt, columns=columns)
        return got, list(fetched)

    def only_needed(reads: List[Tuple[str, int, int]], needed: Dict[str, List[Tuple[int, int]]]) -> int:
        """Checks that every fetch overlaps something the reader needs, and that the bytes fetched are those, with
        at most a minimum fetch (64 KiB) more per fetch; returns the bytes fetched."""
        for path, s, e in reads:
            assert any(s < ne and ns_ < e for ns_, ne in needed.get(path, [])), (path, s, e)
        got = sum(e - s for _, s, e in reads)
        wanted = sum(e - s for ext in needed.values() for s, e in ext)
        assert got <= wanted + len(reads) * fs.block_size, (got, wanted, len(reads))
        return got

    whole, reads = scan(None, ["id", "value", "label", "year"])
    assert whole.num_rows == 400_000
    whole_bytes = sum(e - s for _, s, e in reads)
    # Partition pruning: one file of four, and of it the two columns' chunks.
    cols = ["id", "value"]
    one_year, reads = scan(ds.field("year") == 2021, cols)
    assert one_year.num_rows == 100_000
    needed = {f: extents(fs, f, cols, lambda rg, f=f: "year=2021" in f) for f in files}
    year_bytes = only_needed(reads, needed)
    # Row-group pruning by statistics: each file holds ids in order (every fourth id), 4 row groups of 25 000 rows,
    # so only its first row group has ids below 20 000; the others are skipped by their statistics.
    few, reads = scan(ds.field("id") < 20_000, cols)
    assert sorted(few.column("id").to_pylist()) == list(range(20_000))
    first = {f: extents(fs, f, cols, lambda rg: rg.column(0).statistics.min < 20_000) for f in files}
    assert all(len(e) == 1 + len(cols) for e in first.values())  # the footer and one row group's two columns
    few_bytes = only_needed(reads, first)
    print(f"\nbytes fetched of {total} stored: whole dataset {whole_bytes}; year == 2021, 2 of 3 columns "
          f"{year_bytes}; id < 20000, 2 of 3 columns {few_bytes}")
    assert whole_bytes <= total * 1.05
    assert year_bytes < total / 4 and few_bytes < total / 4


def test_dask_reads_a_dataset(opts: Dict[str, Any], ns: str) -> None:
    df = frame(60_000)
    for i in range(3):
        df.iloc[i * 20_000:(i + 1) * 20_000].to_parquet(f"saltblob://{ns}dask/part-{i}.parquet",
                                                         storage_options=opts)
    ddf = dd.read_parquet(f"saltblob://{ns}dask/", storage_options=opts)
    assert ddf.npartitions == 3
    total = ddf["value"].sum().compute(scheduler="threads")
    assert total == pytest.approx(df["value"].sum())
    by_year = ddf.groupby("year")["id"].count().compute(scheduler="threads").sort_index()
    assert by_year.tolist() == [15_000] * 4
