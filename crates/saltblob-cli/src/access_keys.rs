//! What `saltblob key` does to the access keys kept in the store (`saltblob_server::grants`), as one action
//! with a JSON form: run here on a store this process opened, or sent through the admin socket to the server
//! that holds an embedded store (`crate::admin`), which runs it the same way.

use saltblob::BlobStore;
use saltblob_server::Right;
use serde_json::{Value, json};

/// One change to (or look at) the access keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyAction {
    /// Make a key named `name`; `create_buckets`: it may create buckets; `seal_with`: the provider's key its
    /// secret is sealed under (else the store's).
    Create {
        name: String,
        create_buckets: bool,
        seal_with: Option<String>,
    },
    /// Grant key `id` `right` on `bucket`.
    Allow {
        id: String,
        bucket: String,
        right: Right,
    },
    /// Take key `id`'s grant on `bucket` away.
    Deny { id: String, bucket: String },
    /// List the keys.
    List,
    /// Delete key `id`.
    Delete { id: String },
}

impl KeyAction {
    /// The action as the admin socket's request carries it.
    pub fn to_json(&self) -> Value {
        match self {
            KeyAction::Create {
                name,
                create_buckets,
                seal_with,
            } => {
                json!({"do": "create", "name": name, "create_buckets": create_buckets, "seal_with": seal_with})
            }
            KeyAction::Allow { id, bucket, right } => {
                json!({"do": "allow", "id": id, "bucket": bucket, "right": right.to_string()})
            }
            KeyAction::Deny { id, bucket } => json!({"do": "deny", "id": id, "bucket": bucket}),
            KeyAction::List => json!({"do": "list"}),
            KeyAction::Delete { id } => json!({"do": "delete", "id": id}),
        }
    }

    /// The action a request carries, or why it is refused.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let text = |field: &str| {
            v.get(field)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("a key request needs \"{field}\", a string"))
        };
        match v.get("do").and_then(Value::as_str) {
            Some("create") => Ok(KeyAction::Create {
                name: text("name")?,
                create_buckets: v
                    .get("create_buckets")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                seal_with: v
                    .get("seal_with")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            Some("allow") => Ok(KeyAction::Allow {
                id: text("id")?,
                bucket: text("bucket")?,
                right: text("right")?.parse()?,
            }),
            Some("deny") => Ok(KeyAction::Deny {
                id: text("id")?,
                bucket: text("bucket")?,
            }),
            Some("list") => Ok(KeyAction::List),
            Some("delete") => Ok(KeyAction::Delete { id: text("id")? }),
            other => Err(format!(
                "unknown key action {}: create, allow, deny, list or delete",
                other.unwrap_or("(none)")
            )),
        }
    }

    /// Whether the action changes nothing.
    pub fn is_read_only(&self) -> bool {
        matches!(self, KeyAction::List)
    }

    /// Runs the action on `store`; its outcome as JSON (a new key's secret among it: shown once, never logged).
    ///
    /// # Errors
    /// Those of `saltblob_server`'s key functions.
    pub async fn run(&self, store: &BlobStore) -> saltblob::Result<Value> {
        Ok(match self {
            KeyAction::Create {
                name,
                create_buckets,
                seal_with,
            } => {
                let key =
                    saltblob_server::create_key(store, name, *create_buckets, seal_with.as_deref())
                        .await?;
                json!({"id": key.id, "secret": key.secret.as_str(), "name": name, "create_buckets": create_buckets})
            }
            KeyAction::Allow { id, bucket, right } => {
                saltblob_server::allow(store, id, bucket, *right).await?;
                json!({"id": id, "bucket": bucket, "right": right.to_string()})
            }
            KeyAction::Deny { id, bucket } => {
                let had = saltblob_server::deny(store, id, bucket).await?;
                json!({"id": id, "bucket": bucket, "had_grant": had})
            }
            KeyAction::List => {
                let keys = saltblob_server::list_keys(store).await?;
                let keys: Vec<Value> = keys
                    .iter()
                    .map(|k| {
                        let grants: Vec<Value> = k
                            .grants
                            .iter()
                            .map(|g| json!({"bucket": g.bucket, "right": g.right.to_string(), "stale": g.stale}))
                            .collect();
                        json!({"id": k.id, "name": k.name, "create_buckets": k.may_create_buckets,
                               "created_micros": k.created_micros, "grants": grants})
                    })
                    .collect();
                json!({ "keys": keys })
            }
            KeyAction::Delete { id } => {
                saltblob_server::delete_key(store, id).await?;
                json!({ "id": id })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_travel_as_json_and_bad_ones_are_named() {
        for action in [
            KeyAction::Create {
                name: "reports".into(),
                create_buckets: true,
                seal_with: Some("orders".into()),
            },
            KeyAction::Allow {
                id: "SBKAAAAAAAAAAAAAAAAA".into(),
                bucket: "logs".into(),
                right: Right::Write,
            },
            KeyAction::Deny {
                id: "SBKAAAAAAAAAAAAAAAAA".into(),
                bucket: "logs".into(),
            },
            KeyAction::List,
            KeyAction::Delete {
                id: "SBKAAAAAAAAAAAAAAAAA".into(),
            },
        ] {
            assert_eq!(KeyAction::from_json(&action.to_json()), Ok(action));
        }
        let err =
            KeyAction::from_json(&json!({"do": "allow", "id": "x", "bucket": "b", "right": "all"}))
                .expect_err("a right that is not one");
        assert!(err.contains("not a right"), "{err}");
        let err = KeyAction::from_json(&json!({"do": "grant"})).expect_err("unknown");
        assert!(err.contains("unknown key action grant"), "{err}");
        let err = KeyAction::from_json(&json!({"do": "delete"})).expect_err("no id");
        assert!(err.contains("\"id\""), "{err}");
    }
}
