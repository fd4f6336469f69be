//! Tests of `format/manifest.rs`.

use proptest::prelude::*;

use super::*;

fn sample(body: ManifestBody, size: u64) -> Manifest {
    Manifest {
        version: VersionId(0x0123_4567_89ab_cdef_0011_2233_4455_6677),
        size,
        created_micros: 1_700_000_000_000_000,
        expires_micros: None,
        digest: [7; 32],
        body,
        content_type: Some("application/octet-stream".into()),
        metadata: BTreeMap::from([("owner".into(), "ops".into())]),
        sealing: None,
    }
}

fn sealing() -> Sealing {
    Sealing {
        kek: KekRef {
            provider: crate::encryption::LOCAL,
            name: "tenant-1".into(),
            version: 3,
        },
        wrapped: vec![9; 60],
        commitment: [5; 32],
    }
}

#[test]
fn sealed_manifests_round_trip_as_format_3() {
    let chunked = ManifestBody::Chunked {
        layout: ChunkLayout {
            chunk_size: 65536,
            chunk_count: 2,
            salt_count: 1,
        },
        codec: Codec::None,
        stored_bytes: 100_032,
    };
    for (body, size) in [
        (chunked, 100_000),
        (ManifestBody::Inline(Bytes::from(vec![1; 26])), 10),
    ] {
        let m = Manifest {
            sealing: Some(sealing()),
            ..sample(body, size)
        };
        let enc = m.encode();
        assert_eq!(Manifest::decode(&enc, &what).ok(), Some(m.clone()));
        // Fixture: format 3, the layout tag, then the version id little-endian; the digest tag at 42.
        assert_eq!(enc.get(..3), Some(&[3u8, body_tag(&m.body), 0x77][..]));
        assert_eq!(enc.get(42), Some(&DIGEST_SEALED_BLAKE3));
        // A sealed manifest whose block is dropped (format byte set back to 1) does not decode.
        let mut plain = enc.to_vec();
        plain[0] = MANIFEST_FORMAT_V1;
        let n = plain.len() - 4;
        let crc = crc32c::crc32c(&plain[..n]);
        plain[n..].copy_from_slice(&crc.to_le_bytes());
        assert!(Manifest::decode(&Bytes::from(plain), &what).is_err());
    }
    // An inline body of the wrong length for its size, sealed, is corrupt.
    let short = Manifest {
        sealing: Some(sealing()),
        ..sample(ManifestBody::Inline(Bytes::from(vec![1; 10])), 10)
    };
    let err = Manifest::decode(&short.encode(), &what)
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref().is_some_and(|e| e.contains("16 of tag")),
        "{err:?}"
    );
}

fn what() -> String {
    "test manifest".into()
}

#[test]
fn chunked_manifest_round_trips_and_has_a_stable_encoding() {
    let m = sample(
        ManifestBody::Chunked {
            layout: ChunkLayout {
                chunk_size: 65536,
                chunk_count: 3,
                salt_count: 1,
            },
            codec: Codec::Zstd,
            stored_bytes: 150_000,
        },
        140_000,
    );
    let enc = m.encode();
    assert_eq!(Manifest::decode(&enc, &what).ok(), Some(m));
    // Fixture: the first bytes of format version 1 (format, layout tag, version id little-endian).
    assert_eq!(enc.get(..4), Some(&[1u8, 1, 0x77, 0x66][..]));
}

/// Layouts whose fields are each consistent with the size but out of bounds: readers size buffers and
/// lists by these fields, so decoding refuses them.
#[test]
fn layouts_out_of_bounds_are_corrupt() {
    let chunked = |chunk_size: u32, salt_count: u32, size: u64| {
        let chunk_count = size.div_ceil(u64::from(chunk_size));
        let layout = ChunkLayout {
            chunk_size,
            chunk_count,
            salt_count,
        };
        let body = ManifestBody::Chunked {
            layout,
            codec: Codec::None,
            stored_bytes: size,
        };
        Manifest::decode(&sample(body, size).encode(), &what)
    };
    assert!(chunked(MIN_CHUNK_SIZE, 1, 100_000).is_ok());
    assert!(chunked(MAX_CHUNK_SIZE, 1, 100 << 20).is_ok());
    for (chunk_size, salt_count, size) in [
        (1, 1, 100_000),                     // chunks below 4 KiB
        (MAX_CHUNK_SIZE + 1, 1, 1 << 30),    // chunks above 64 MiB
        (u32::MAX, 1, u64::MAX),             // a 4 GiB chunk of an "enormous" blob
        (4096, MAX_SALT_LIMIT + 1, 1 << 30), // more salts than any policy allows
        (4096, 0, 100_000),                  // no salt at all
    ] {
        match chunked(chunk_size, salt_count, size) {
            Err(Error::Corrupt { detail, .. }) => {
                assert!(detail.contains("out of bounds"), "{detail}")
            }
            other => panic!("chunk size {chunk_size}, salts {salt_count}: {other:?}"),
        }
    }
}

fn segmented_sample() -> Manifest {
    let segments = vec![
        Segment {
            version: VersionId(5),
            size: 140_000,
            digest: [1; 32],
            body: ManifestBody::Chunked {
                layout: ChunkLayout {
                    chunk_size: 65536,
                    chunk_count: 3,
                    salt_count: 3,
                },
                codec: Codec::None,
                stored_bytes: 140_100,
            },
            sealing: None,
        },
        Segment {
            version: VersionId(6),
            size: 2,
            digest: [2; 32],
            body: ManifestBody::Inline(Bytes::from_static(b"hi")),
            sealing: None,
        },
    ];
    Manifest {
        digest: segments_digest(&segments),
        body: ManifestBody::Segmented(segments),
        ..sample(ManifestBody::Inline(Bytes::new()), 140_002)
    }
}

/// Format version 4: a segmented body with a sealed segment (inline, so that its body changes too) round
/// trips, each segment keeping its own sealing; a sealed segment encoded alone round trips as format 2 of
/// the segment record, and an inline one whose block is dropped does not decode.
#[test]
fn sealed_segments_round_trip_as_format_4() {
    let mut m = segmented_sample();
    let ManifestBody::Segmented(segments) = &mut m.body else {
        panic!("segmented");
    };
    segments[1].sealing = Some(sealing());
    segments[1].body = ManifestBody::Inline(Bytes::from(vec![3; 18]));
    let enc = m.encode();
    assert_eq!(enc.first(), Some(&MANIFEST_FORMAT_V4));
    assert_eq!(Manifest::decode(&enc, &what).ok(), Some(m.clone()));
    assert_eq!(m.sealed_by().map(|s| s.kek.version), Some(3));
    let ManifestBody::Segmented(segments) = &m.body else {
        panic!("segmented");
    };
    let alone = segments[1].encode();
    assert_eq!(alone.first(), Some(&SEGMENT_FORMAT_V2));
    assert_eq!(Segment::decode(&alone).ok().as_ref(), Some(&segments[1]));
    let mut stripped = segments[1].clone();
    stripped.sealing = None;
    assert!(Segment::decode(&stripped.encode()).is_err());
    // A plaintext chunked segment stays format 1 alone.
    assert_eq!(segments[0].encode().first(), Some(&SEGMENT_FORMAT_V1));
}

/// Format version 2: a segmented body round trips, owns its segments' versions, and is refused when its
/// size or digest disagrees with its segments, or when a format-1 header carries it.
#[test]
fn segmented_manifest_round_trips_and_checks_its_segments() {
    let m = segmented_sample();
    let enc = m.encode();
    // Fixture: format 2, layout tag 2, then the version id little-endian; digest tag 2 after the times.
    assert_eq!(enc.get(..4), Some(&[2u8, 2, 0x77, 0x66][..]));
    assert_eq!(enc.get(42), Some(&DIGEST_BLAKE3_OF_SEGMENTS));
    assert_eq!(Manifest::decode(&enc, &what).ok(), Some(m.clone()));
    assert!(m.owns(VersionId(5)) && m.owns(VersionId(6)) && m.owns(m.version));
    assert!(!m.owns(VersionId(7)));
    assert_eq!(m.stored_bytes(), 140_100);
    for s in m.segments() {
        assert_eq!(Segment::decode(&s.encode()).ok(), Some(s));
    }
    let refused = |m: Manifest, needle: &str| match Manifest::decode(&m.encode(), &what) {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains(needle), "{detail}"),
        other => panic!("{needle}: {other:?}"),
    };
    refused(
        Manifest {
            size: 140_003,
            ..m.clone()
        },
        "segments hold",
    );
    refused(
        Manifest {
            digest: [9; 32],
            ..m.clone()
        },
        "digest does not match",
    );
    let mut v1 = m.encode().to_vec();
    v1[0] = MANIFEST_FORMAT_V1;
    let n = v1.len() - 4;
    let crc = crc32c::crc32c(&v1[..n]);
    v1[n..].copy_from_slice(&crc.to_le_bytes());
    match Manifest::decode(&Bytes::from(v1), &what) {
        Err(Error::Corrupt { detail, .. }) => {
            assert!(detail.contains("format version 1"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    let mut damaged = m.segments()[0].encode().to_vec();
    damaged[3] ^= 1;
    assert!(Segment::decode(&Bytes::from(damaged)).is_err());
}

#[test]
fn damage_is_reported_with_evidence() {
    let enc = sample(ManifestBody::Inline(Bytes::from_static(b"hi")), 2).encode();
    let mut v = enc.to_vec();
    v[5] ^= 0xff;
    let err = Manifest::decode(&Bytes::from(v), &what)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("corrupt test manifest: trailer crc32c"),
        "{err}"
    );
    let err = Manifest::decode(&enc.slice(..3), &what)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("too short"), "{err}");
}

proptest! {
    #[test]
    fn manifests_round_trip(
        data in proptest::collection::vec(any::<u8>(), 0..2000),
        chunked in any::<bool>(),
        size in 1u64..1 << 40,
        expires in proptest::option::of(1u64..u64::MAX),
        ct in proptest::option::of("[a-z/]{1,40}"),
        meta in proptest::collection::btree_map("[a-z]{1,8}", ".{0,20}", 0..5),
    ) {
        let (body, size) = if chunked {
            let count = size.div_ceil(4096);
            let salt = u32::try_from(count.min(100)).unwrap_or(100);
            (ManifestBody::Chunked { layout: ChunkLayout { chunk_size: 4096, chunk_count: count, salt_count: salt }, codec: Codec::Lz4, stored_bytes: size }, size)
        } else {
            let len = data.len() as u64;
            (ManifestBody::Inline(Bytes::from(data)), len)
        };
        let m = Manifest { expires_micros: expires, content_type: ct, metadata: meta, ..sample(body, size) };
        prop_assert_eq!(Manifest::decode(&m.encode(), &what).ok(), Some(m));
    }

    /// Arbitrary bytes under a valid trailer CRC (so that decoding gets past the checksum into the fields)
    /// never panic, and whatever decodes is within the format's bounds.
    #[test]
    fn arbitrary_bytes_with_a_valid_crc_never_panic(body in proptest::collection::vec(any::<u8>(), 0..400), prefix in 0usize..3) {
        // Often start like a real manifest, so that the fields after the header are reached too.
        let mut v = match prefix {
            0 => Vec::new(),
            1 => vec![MANIFEST_FORMAT_V1, TAG_INLINE],
            _ => vec![MANIFEST_FORMAT_V1, TAG_CHUNKED],
        };
        v.extend_from_slice(&body);
        let crc = crc32c::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        if let Ok(m) = Manifest::decode(&Bytes::from(v), &what)
            && let Layout::Chunked(l) = m.layout()
        {
            prop_assert!((MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&l.chunk_size));
            prop_assert!((1..=MAX_SALT_LIMIT).contains(&l.salt_count));
            prop_assert_eq!(l.chunk_count, m.size.div_ceil(u64::from(l.chunk_size)));
        }
    }

    #[test]
    fn truncation_never_panics_and_is_an_error(cut in 0usize..200) {
        let enc = sample(ManifestBody::Inline(Bytes::from_static(b"payload")), 7).encode();
        let cut = cut % enc.len();
        prop_assert!(Manifest::decode(&enc.slice(..cut), &what).is_err());
    }
}
