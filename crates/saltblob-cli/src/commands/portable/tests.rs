//! The export stream's codec: round trips (property tests), and every truncation and every flipped byte of a
//! stream refused with its offset, never a blob delivered whose bytes differ.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

/// What a stream holds, as written and as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    Blob(BlobHead, Vec<u8>),
    LeftOut(Vec<u8>, String),
    /// A blob cut short after the data given, for the reason given (read back without its data).
    Aborted(BlobHead, Vec<u8>, String),
}

fn header() -> StreamHeader {
    StreamHeader {
        created_micros: 1_764_700_000_000_000,
        writer: "saltblob test".into(),
        prefix: Vec::new(),
        after: None,
    }
}

fn head(key: &[u8], data: &[u8]) -> BlobHead {
    BlobHead {
        key: key.to_vec(),
        size: data.len() as u64,
        content_type: Some("text/plain".into()),
        expires_micros: None,
        sealed: None,
        metadata: BTreeMap::from([("a".to_owned(), "b".to_owned())]),
        sealed_metadata: BTreeMap::new(),
        digest: Some(*blake3::hash(data).as_bytes()),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
}

/// Writes `items` as a stream, the data of each blob in pieces of `piece` bytes.
async fn encode(items: &[Item], piece: usize) -> Vec<u8> {
    let mut w = StreamWriter::start(Vec::new(), &header())
        .await
        .expect("start");
    for item in items {
        match item {
            Item::Blob(h, data) => {
                w.begin_blob(h).await.expect("begin");
                for p in data.chunks(piece.max(1)) {
                    w.data(&Bytes::copy_from_slice(p)).await.expect("data");
                }
                w.end_blob().await.expect("end");
            }
            Item::LeftOut(key, reason) => w.left_out(key, reason).await.expect("left out"),
            Item::Aborted(h, data, reason) => {
                w.begin_blob(h).await.expect("begin");
                w.data(&Bytes::copy_from_slice(data)).await.expect("data");
                w.abort_blob(reason).await.expect("abort");
            }
        }
    }
    w.finish().await.expect("finish")
}

/// Reads a stream: the items read in full, and how it ended.
async fn decode(bytes: &[u8]) -> (Vec<Item>, Result<Totals, StreamError>) {
    let mut got = Vec::new();
    let mut d = match Decoder::open(bytes).await {
        Ok(d) => d,
        Err(e) => return (got, Err(e)),
    };
    loop {
        match d.next_record().await {
            Ok(Record::Blob(h)) => {
                let mut data = Vec::new();
                loop {
                    match d.next_piece().await {
                        Ok(Piece::Data(b)) => data.extend_from_slice(&b),
                        Ok(Piece::End) => {
                            got.push(Item::Blob(h, data));
                            break;
                        }
                        Ok(Piece::Aborted(reason)) => {
                            got.push(Item::Aborted(h, data, reason));
                            break;
                        }
                        Err(e) => return (got, Err(e)),
                    }
                }
            }
            Ok(Record::LeftOut { key, reason }) => got.push(Item::LeftOut(key, reason)),
            Ok(Record::End(t)) => return (got, Ok(t)),
            Err(e) => return (got, Err(e)),
        }
    }
}

/// A stream of a few records of every kind: blobs (empty, one frame, several frames), a left-out key, a blob
/// cut short.
fn sample() -> Vec<Item> {
    let big: Vec<u8> = (0..(MAX_FRAME as usize * 2 + 77))
        .map(|i| (i % 251) as u8)
        .collect();
    vec![
        Item::Blob(head(b"a", b""), Vec::new()),
        Item::Blob(head(b"b\xff\x00", b"hello"), b"hello".to_vec()),
        Item::LeftOut(b"c".to_vec(), "sealed with a customer key".into()),
        Item::Aborted(
            head(b"d", b"0123456789"),
            b"01234".to_vec(),
            "chunk 3 is missing".into(),
        ),
        Item::Blob(head(b"e", &big), big),
    ]
}

/// The sample as read back: an aborted blob's data is not delivered as a blob.
fn totals_of(items: &[Item]) -> Totals {
    let mut t = Totals::default();
    for item in items {
        match item {
            Item::Blob(h, _) => {
                t.blobs += 1;
                t.bytes += h.size;
            }
            _ => t.left_out += 1,
        }
    }
    t
}

#[tokio::test]
async fn a_stream_reads_back_as_written() {
    let items = sample();
    let bytes = encode(&items, 300_000).await;
    let (got, end) = decode(&bytes).await;
    assert_eq!(end.expect("complete"), totals_of(&items));
    assert_eq!(got, items);
}

#[tokio::test]
async fn every_truncation_is_refused_where_the_stream_ends() {
    let items = sample();
    let bytes = encode(&items, 1 << 20).await;
    // Every cut in the small records, and cuts around each frame of the large blob.
    let large_from = bytes.len() - (MAX_FRAME as usize * 2 + 77) - 200;
    let cuts = (0..large_from.min(2000))
        .chain((large_from..bytes.len()).step_by(4099))
        .chain(bytes.len() - 80..bytes.len());
    for cut in cuts {
        let (got, end) = decode(&bytes[..cut]).await;
        match end {
            Err(StreamError::Truncated { at, .. }) => assert_eq!(at, cut as u64, "cut at {cut}"),
            other => panic!("cut at {cut}: {other:?}"),
        }
        assert!(items.starts_with(&got), "cut at {cut}: {got:?}");
    }
}

#[tokio::test]
async fn every_flipped_byte_is_refused_and_no_blob_read_differs() {
    let items: Vec<Item> = sample().into_iter().take(4).collect();
    let bytes = encode(&items, 3).await;
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            let (got, end) = decode(&bad).await;
            assert!(end.is_err(), "byte {i} flipped ({bit:#x}) read as {got:?}");
            assert!(
                items.starts_with(&got),
                "byte {i} flipped: what was read differs: {got:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_digest_is_checked_before_the_last_bytes_are_handed_over() {
    let data = b"0123456789".to_vec();
    let items = vec![Item::Blob(head(b"k", &data), data.clone())];
    let mut bytes = encode(&items, 4).await;
    // The digest follows the last frame, before the trailer (29 bytes).
    let digest_at = bytes.len() - 29 - 32;
    bytes[digest_at] ^= 1;
    let mut d = Decoder::open(&bytes[..]).await.expect("open");
    let Record::Blob(h) = d.next_record().await.expect("record") else {
        panic!("a blob");
    };
    assert_eq!(h.size, 10);
    let mut seen = Vec::new();
    let error = loop {
        match d.next_piece().await {
            Ok(Piece::Data(b)) => seen.extend_from_slice(&b),
            other => break other,
        }
    };
    let Err(StreamError::Corrupt { at, what }) = error else {
        panic!("{error:?}");
    };
    assert_eq!(at, digest_at as u64);
    assert!(what.contains("\"k\"") && what.contains("BLAKE3"), "{what}");
    assert!(
        seen.len() < data.len(),
        "the last piece was withheld: {seen:?}"
    );
}

#[tokio::test]
async fn another_magic_or_version_is_refused_before_anything_else() {
    let bytes = encode(&sample()[..1], 10).await;
    let mut other = bytes.clone();
    other[..4].copy_from_slice(b"PK\x03\x04");
    assert!(matches!(
        decode(&other).await.1,
        Err(StreamError::NotAStream { .. })
    ));
    let mut newer = bytes.clone();
    newer[8] = 2;
    let end = decode(&newer).await.1;
    assert!(
        matches!(end, Err(StreamError::Version { found: 2 })),
        "{end:?}"
    );
    assert!(matches!(
        decode(b"").await.1,
        Err(StreamError::Truncated { at: 0, .. })
    ));
    let mut trailing = bytes.clone();
    trailing.push(0);
    let end = decode(&trailing).await.1;
    assert!(
        matches!(&end, Err(StreamError::Corrupt { what, .. }) if what.contains("after the trailer")),
        "{end:?}"
    );
}

#[tokio::test]
async fn keys_out_of_order_are_refused() {
    let items = vec![
        Item::Blob(head(b"b", b"x"), b"x".to_vec()),
        Item::Blob(head(b"a", b"y"), b"y".to_vec()),
    ];
    let bytes = encode(&items, 10).await;
    let (got, end) = decode(&bytes).await;
    assert_eq!(got.len(), 1);
    assert!(
        matches!(&end, Err(StreamError::Corrupt { what, .. }) if what.contains("does not come after")),
        "{end:?}"
    );
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 /:._-]{0,24}"
}

fn blob_head() -> impl Strategy<Value = BlobHead> {
    (
        prop::collection::vec(any::<u8>(), 1..64),
        any::<u64>(),
        prop::option::of(text()),
        prop::option::of(any::<u64>()),
        prop::option::of((text(), text())),
        prop::collection::btree_map(text(), text(), 0..5),
        prop::collection::btree_map(text(), text(), 0..3),
        prop::option::of(prop::array::uniform32(any::<u8>())),
    )
        .prop_map(
            |(
                key,
                size,
                content_type,
                expires_micros,
                sealed,
                metadata,
                sealed_metadata,
                digest,
            )| {
                BlobHead {
                    key,
                    size,
                    content_type,
                    expires_micros,
                    sealed: sealed.map(|(provider, key)| SealedBy { provider, key }),
                    metadata,
                    sealed_metadata,
                    digest,
                }
            },
        )
}

proptest! {
    #[test]
    fn blob_heads_round_trip(h in blob_head()) {
        let block = h.encode().expect("encode");
        prop_assert_eq!(BlobHead::decode(&block).expect("decode"), h);
    }

    #[test]
    fn headers_round_trip(created in any::<u64>(), prefix in prop::collection::vec(any::<u8>(), 0..40),
                          after in prop::option::of(prop::collection::vec(any::<u8>(), 1..40))) {
        let h = StreamHeader { created_micros: created, writer: "saltblob 0.1.0".into(), prefix, after };
        prop_assert_eq!(StreamHeader::decode(&h.encode().expect("encode")).expect("decode"), h);
    }

    #[test]
    fn streams_round_trip(
        blobs in prop::collection::btree_map(
            prop::collection::vec(any::<u8>(), 1..12),
            (prop::collection::vec(any::<u8>(), 0..3000), 0u8..4),
            0..8,
        ),
        piece in 1usize..5000,
    ) {
        let items: Vec<Item> = blobs
            .into_iter()
            .map(|(key, (data, kind))| match kind {
                0 => Item::LeftOut(key, "left out".into()),
                1 => Item::Aborted(head(&key, &data), data.get(..data.len() / 2).unwrap_or_default().to_vec(), "cut".into()),
                _ => Item::Blob(head(&key, &data), data),
            })
            .collect();
        let (got, end) = runtime().block_on(async {
            let bytes = encode(&items, piece).await;
            decode(&bytes).await
        });
        prop_assert_eq!(end.expect("complete"), totals_of(&items));
        prop_assert_eq!(got, items);
    }

    #[test]
    fn garbage_is_never_a_stream(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let (got, end) = runtime().block_on(decode(&bytes));
        prop_assert!(end.is_err());
        prop_assert!(got.is_empty());
    }
}

#[test]
fn left_out_and_key_checks() {
    assert!(decode_left_out(&encode_left_out(b"", "x").expect("encode")).is_err());
    let long = vec![b'k'; saltblob::MAX_KEY_LEN + 1];
    assert!(decode_left_out(&encode_left_out(&long, "x").expect("encode")).is_err());
}

/// An empty blob cut short before any data: the case proptest found (a stream whose abort came where the end of an
/// empty blob was expected).
#[test]
fn an_empty_blob_cut_short_round_trips() {
    let items = vec![Item::Aborted(head(&[0], b""), Vec::new(), "cut".into())];
    let (got, end) = runtime().block_on(async {
        let bytes = encode(&items, 1).await;
        decode(&bytes).await
    });
    assert_eq!(end.expect("complete"), totals_of(&items));
    assert_eq!(got, items);
}

/// A blob cut short once all its data is written (a read that ran past the size): the abort stands where the
/// digest would, and the reader hands over no byte of the last frame.
#[test]
fn a_blob_cut_short_after_its_data_is_read_as_cut_short() {
    let data = b"0123456789".to_vec();
    let bytes = runtime().block_on(async {
        let mut w = StreamWriter::start(Vec::new(), &header())
            .await
            .expect("start");
        w.begin_blob(&head(b"k", &data)).await.expect("begin");
        w.data(&Bytes::copy_from_slice(&data[..4]))
            .await
            .expect("data");
        w.data(&Bytes::copy_from_slice(&data[4..]))
            .await
            .expect("data");
        w.abort_blob("read past").await.expect("abort");
        w.finish().await.expect("finish")
    });
    let (got, end) = runtime().block_on(decode(&bytes));
    let expected = vec![Item::Aborted(
        head(b"k", &data),
        data[..4].to_vec(),
        "read past".into(),
    )];
    assert_eq!(end.expect("complete"), totals_of(&expected));
    assert_eq!(got, expected);
}
