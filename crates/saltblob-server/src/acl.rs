//! Canned ACLs (`docs/s3.md`, "ACLs"): what a bucket or an object lets anyone, or any signed key, do without a
//! grant. A bucket's ACL is kept in its bucket record's metadata, an object's in its manifest, both under
//! [`ACL_KEY`] and changed in place (the version stays: grants bound to a bucket record's version still hold).
//! Without one, a bucket or object is `private`.
//!
//! An ACL only opens: it never takes a grant away, and the owner is always the one owner every bucket and
//! object has ([`OWNER_ID`]). What each opens, as on AWS:
//!
//! | ACL | on a bucket | on an object |
//! |---|---|---|
//! | `public-read` | anyone lists it (ListObjects, ListObjectsV2, HeadBucket) | anyone reads it (GetObject, HeadObject) |
//! | `public-read-write` | also: anyone writes and deletes its objects (PutObject, DeleteObject(s), multipart) | as `public-read` |
//! | `authenticated-read` | any signed key lists it | any signed key reads it |
//! | `private`, `bucket-owner-read`, `bucket-owner-full-control` | nothing more | nothing more (the bucket's owner is the object's) |
//!
//! Opening a bucket or an object (an ACL other than those of the last row) is an owner's decision: a key kept
//! in the store needs `owner` on the bucket for it; a request let in by an ACL alone cannot set one. Grants
//! (`x-amz-grant-*`, a policy naming other grantees) are not supported: `guard.rs` and [`Canned::from_policy`]
//! refuse them.

use std::collections::BTreeMap;

use s3s::dto::{AccessControlPolicy, Grant, Grantee, Owner, Permission, Type};
use s3s::{S3Error, S3ErrorCode, S3Request, S3Result, s3_error};
use saltblob_core::{Manifest, VersionId};

use crate::grants::{Caller, Right};

/// Metadata key of a bucket's or an object's canned ACL, when it has one other than `private`.
pub(crate) const ACL_KEY: &str = "s3:acl";

/// The owner of every bucket and object (all access keys share one owner), as ACLs name it.
pub(crate) const OWNER_ID: &str = "saltblob";

/// The group of everyone, signed or not.
const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
/// The group of every signed request.
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

/// A canned ACL saltblob keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Canned {
    Private,
    PublicRead,
    PublicReadWrite,
    AuthenticatedRead,
    BucketOwnerRead,
    BucketOwnerFullControl,
}

/// Each canned ACL with its name, as `x-amz-acl` carries it.
const NAMES: [(Canned, &str); 6] = [
    (Canned::Private, "private"),
    (Canned::PublicRead, "public-read"),
    (Canned::PublicReadWrite, "public-read-write"),
    (Canned::AuthenticatedRead, "authenticated-read"),
    (Canned::BucketOwnerRead, "bucket-owner-read"),
    (Canned::BucketOwnerFullControl, "bucket-owner-full-control"),
];

/// Who a request comes from, as an ACL tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Requester {
    /// An unsigned request.
    Anyone,
    /// A request signed by a key kept in the store.
    Signed,
}

impl Canned {
    /// The canned ACL named `name` (`x-amz-acl`'s value); `None` for one saltblob does not keep
    /// (`aws-exec-read`, `log-delivery-write`, anything else).
    pub(crate) fn parse(name: &str) -> Option<Self> {
        NAMES.iter().find(|(_, n)| *n == name).map(|(c, _)| *c)
    }

    /// The name of this ACL.
    pub(crate) fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(c, _)| *c == self)
            .map_or("private", |(_, n)| n)
    }

    /// The ACL named by header `x-amz-acl` (`value`).
    ///
    /// # Errors
    /// `AccessControlListNotSupported` (400) for one saltblob does not keep (`guard.rs` refuses those first).
    pub(crate) fn from_header(value: &str) -> S3Result<Self> {
        Self::parse(value).ok_or_else(unsupported)
    }

    /// The ACL a request's `x-amz-acl` asks for (`private` without one).
    ///
    /// # Errors
    /// As [`Self::from_header`].
    pub(crate) fn asked(header: Option<&str>) -> S3Result<Self> {
        header.map_or(Ok(Self::Private), Self::from_header)
    }

    /// The ACL of the bucket record or object stored as `m` (`private` without one; a value this server does
    /// not know opens nothing and is logged).
    pub(crate) fn of(m: &Manifest) -> Self {
        let Some(name) = m.metadata.get(ACL_KEY) else {
            return Self::Private;
        };
        Self::parse(name).unwrap_or_else(|| {
            tracing::warn!(acl = %name, "an ACL this server does not know: it opens nothing");
            Self::Private
        })
    }

    /// Whether this ACL opens what it is set on to someone without a grant.
    pub(crate) fn opens(self) -> bool {
        matches!(
            self,
            Self::PublicRead | Self::PublicReadWrite | Self::AuthenticatedRead
        )
    }

    /// Sets this ACL in `metadata` (`private` and those that open nothing are kept as no ACL).
    pub(crate) fn store_in(self, metadata: &mut BTreeMap<String, String>) {
        if self.opens() {
            metadata.insert(ACL_KEY.to_owned(), self.name().to_owned());
        } else {
            metadata.remove(ACL_KEY);
        }
    }

    /// Whether `who` may read under this ACL (on a bucket: list it; on an object: read it).
    pub(crate) fn lets_read(self, who: Requester) -> bool {
        match self {
            Self::PublicRead | Self::PublicReadWrite => true,
            Self::AuthenticatedRead => who == Requester::Signed,
            _ => false,
        }
    }

    /// Whether `who` may write the objects of a bucket with this ACL.
    pub(crate) fn lets_write(self, _who: Requester) -> bool {
        self == Self::PublicReadWrite
    }

    /// The ACL a `PUT ?acl` asks for: its `x-amz-acl` (`header`), else its body (`policy`).
    ///
    /// # Errors
    /// `AccessControlListNotSupported` as [`Self::from_policy`]; `MalformedACLError` without either.
    pub(crate) fn requested(
        header: Option<&str>,
        policy: Option<&AccessControlPolicy>,
    ) -> S3Result<Self> {
        match (header, policy) {
            (Some(value), _) => Self::from_header(value),
            (None, Some(policy)) => Self::from_policy(policy),
            (None, None) => Err(S3Error::with_message(
                S3ErrorCode::MalformedACLError,
                "The XML you provided was not well-formed or did not validate against our published schema",
            )),
        }
    }

    /// The canned ACL a policy (a `PUT ?acl` body) says: the owner's `FULL_CONTROL` and, besides it, nothing
    /// (`private`), `READ` for everyone (`public-read`), `READ` and `WRITE` for everyone (`public-read-write`)
    /// or `READ` for signed requests (`authenticated-read`) — as GetBucketAcl and GetObjectAcl show them, so
    /// that a tool may put back the ACL it read.
    ///
    /// # Errors
    /// `AccessControlListNotSupported` (400) for any other: another owner, grants to other users or groups,
    /// other permissions, or no `FULL_CONTROL` for the owner (an ACL cannot take the owner's access away).
    pub(crate) fn from_policy(policy: &AccessControlPolicy) -> S3Result<Self> {
        let owner_ok = policy
            .owner
            .as_ref()
            .is_none_or(|o| o.id.as_deref().is_none_or(|id| id == OWNER_ID));
        let mut owner_full = false;
        let mut others: Vec<(&str, &str)> = Vec::new();
        for grant in policy.grants.as_deref().unwrap_or_default() {
            let permission = grant.permission.as_ref().map_or("", |p| p.as_str());
            let Some(grantee) = grant.grantee.as_ref() else {
                return Err(unsupported());
            };
            match (
                grantee.type_.as_str(),
                grantee.id.as_deref(),
                grantee.uri.as_deref(),
            ) {
                (Type::CANONICAL_USER, Some(OWNER_ID), _)
                    if permission == Permission::FULL_CONTROL =>
                {
                    owner_full = true;
                }
                (Type::GROUP, _, Some(uri)) => others.push((uri, permission)),
                _ => return Err(unsupported()),
            }
        }
        others.sort_unstable();
        others.dedup();
        let canned = match others.as_slice() {
            [] => Self::Private,
            [(ALL_USERS, Permission::READ)] => Self::PublicRead,
            [
                (ALL_USERS, Permission::READ),
                (ALL_USERS, Permission::WRITE),
            ] => Self::PublicReadWrite,
            [(AUTHENTICATED_USERS, Permission::READ)] => Self::AuthenticatedRead,
            _ => return Err(unsupported()),
        };
        if owner_ok && owner_full {
            Ok(canned)
        } else {
            Err(unsupported())
        }
    }

    /// The owner and the grants this ACL makes, as GetBucketAcl and GetObjectAcl answer them.
    pub(crate) fn to_policy(self) -> (Option<Owner>, Option<Vec<Grant>>) {
        let user = Grantee {
            display_name: Some(OWNER_ID.to_owned()),
            email_address: None,
            id: Some(OWNER_ID.to_owned()),
            type_: Type::from_static(Type::CANONICAL_USER),
            uri: None,
        };
        let group = |uri: &str| Grantee {
            display_name: None,
            email_address: None,
            id: None,
            type_: Type::from_static(Type::GROUP),
            uri: Some(uri.to_owned()),
        };
        let grant = |grantee, permission| Grant {
            grantee: Some(grantee),
            permission: Some(Permission::from_static(permission)),
        };
        // The groups' grants first, then the owner's, as RGW lists them (S3's conformance suite compares the
        // lists in that order; a grant list has no order of its own).
        let mut grants = match self {
            Self::PublicRead => vec![grant(group(ALL_USERS), Permission::READ)],
            Self::PublicReadWrite => vec![
                grant(group(ALL_USERS), Permission::READ),
                grant(group(ALL_USERS), Permission::WRITE),
            ],
            Self::AuthenticatedRead => vec![grant(group(AUTHENTICATED_USERS), Permission::READ)],
            Self::Private | Self::BucketOwnerRead | Self::BucketOwnerFullControl => Vec::new(),
        };
        grants.push(grant(user, Permission::FULL_CONTROL));
        (Some(owner()), Some(grants))
    }
}

/// Checks that `req` may open `bucket` (whose record has version `version`) or one of its objects with an ACL:
/// a root key may; a key kept in the store needs `owner` on the bucket; an unsigned request may not.
///
/// # Errors
/// `AccessDenied` (403).
pub(crate) fn may_open<T>(req: &S3Request<T>, bucket: &str, version: VersionId) -> S3Result<()> {
    let allowed = req.credentials.is_some()
        && req
            .extensions
            .get::<Caller>()
            .is_none_or(|Caller(key)| key.right_on(bucket, version) == Some(Right::Owner));
    if allowed {
        Ok(())
    } else {
        Err(s3_error!(AccessDenied, "Access Denied"))
    }
}

/// The owner every bucket and object has, as ACLs and listings show it.
pub(crate) fn owner() -> Owner {
    Owner {
        display_name: Some(OWNER_ID.to_owned()),
        id: Some(OWNER_ID.to_owned()),
    }
}

/// The message of every refusal of an ACL saltblob does not keep.
pub(crate) const UNSUPPORTED_MESSAGE: &str = "This ACL is not supported: only the canned ACLs private, \
    public-read, public-read-write, authenticated-read, bucket-owner-read and bucket-owner-full-control are";

/// `AccessControlListNotSupported` (400): an ACL saltblob does not keep (AWS's code for an ACL a bucket does
/// not allow).
pub(crate) fn unsupported() -> S3Error {
    S3Error::with_message(
        S3ErrorCode::AccessControlListNotSupported,
        UNSUPPORTED_MESSAGE,
    )
}

/// The operations a bucket's ACL may let a request run without a grant when it lets read.
pub(crate) const BUCKET_READ_OPS: [&str; 3] = ["ListObjects", "ListObjectsV2", "HeadBucket"];
/// The operations a bucket's ACL may let a request run without a grant when it lets write.
pub(crate) const BUCKET_WRITE_OPS: [&str; 7] = [
    "PutObject",
    "DeleteObject",
    "DeleteObjects",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
];
/// The operations an object's ACL may let a request run without a grant when it lets read.
pub(crate) const OBJECT_READ_OPS: [&str; 2] = ["GetObject", "HeadObject"];

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(grants: Vec<Grant>) -> AccessControlPolicy {
        AccessControlPolicy {
            grants: Some(grants),
            owner: Some(owner()),
        }
    }

    #[test]
    fn names_parse_and_round_trip() {
        for (canned, name) in NAMES {
            assert_eq!(Canned::parse(name), Some(canned));
            assert_eq!(canned.name(), name);
        }
        assert_eq!(Canned::parse("aws-exec-read"), None);
        assert_eq!(Canned::parse("PUBLIC-READ"), None);
        assert!(Canned::from_header("log-delivery-write").is_err());
    }

    #[test]
    fn only_acls_that_open_are_stored() {
        let mut m = BTreeMap::new();
        Canned::PublicRead.store_in(&mut m);
        assert_eq!(m.get(ACL_KEY).map(String::as_str), Some("public-read"));
        Canned::BucketOwnerFullControl.store_in(&mut m);
        assert!(m.is_empty());
    }

    #[test]
    fn who_may_do_what_under_each_acl() {
        use Requester::{Anyone, Signed};
        assert!(Canned::PublicRead.lets_read(Anyone) && !Canned::PublicRead.lets_write(Anyone));
        assert!(Canned::PublicReadWrite.lets_write(Anyone));
        assert!(Canned::AuthenticatedRead.lets_read(Signed));
        assert!(!Canned::AuthenticatedRead.lets_read(Anyone));
        assert!(!Canned::AuthenticatedRead.lets_write(Signed));
        for closed in [
            Canned::Private,
            Canned::BucketOwnerRead,
            Canned::BucketOwnerFullControl,
        ] {
            assert!(!closed.opens());
            assert!(!closed.lets_read(Signed) && !closed.lets_write(Signed));
        }
    }

    #[test]
    fn policies_read_back_as_the_acl_they_show() {
        for (canned, _) in NAMES {
            let (owner, grants) = canned.to_policy();
            let read = AccessControlPolicy { grants, owner };
            let expected = if canned.opens() {
                canned
            } else {
                Canned::Private
            };
            assert_eq!(
                Canned::from_policy(&read).ok(),
                Some(expected),
                "{canned:?}"
            );
        }
    }

    #[test]
    fn policies_beyond_the_canned_ones_are_refused() {
        let (_, grants) = Canned::PublicRead.to_policy();
        let grants = grants.unwrap_or_default();
        // Without the owner's FULL_CONTROL.
        assert!(Canned::from_policy(&policy(grants[..1].to_vec())).is_err());
        assert!(Canned::from_policy(&policy(vec![])).is_err());
        // Another user.
        let mut other = grants.clone();
        if let Some(g) = other[1].grantee.as_mut() {
            g.id = Some("someone".into());
        }
        assert!(Canned::from_policy(&policy(other)).is_err());
        // WRITE alone for everyone.
        let mut write = grants.clone();
        write[0].permission = Some(Permission::from_static(Permission::WRITE));
        assert!(Canned::from_policy(&policy(write)).is_err());
        // Another owner.
        let mut p = policy(grants);
        p.owner = Some(Owner {
            display_name: None,
            id: Some("someone".into()),
        });
        assert!(Canned::from_policy(&p).is_err());
    }
}
