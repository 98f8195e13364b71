//! Commits to a REST catalog: the Iceberg REST protocol's `POST …/namespaces/{ns}/tables/{t}`
//! with requirements the catalog checks atomically.
//!
//! The `iceberg-catalog-rest` crate loads and creates tables, but its `update_table` takes a
//! `TableCommit`, which only the `iceberg` crate's own transactions can build. smelt sends
//! the same request itself (`CommitTableRequest`, the crate's type), authenticated the way
//! the crate is configured: a `token`, or OAuth2 client credentials (`credential: id:secret`).

use std::collections::HashMap;

use iceberg::{TableIdent, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{CommitTableRequest, CommitTableResponse};
use smelt_spec::TableName;
use tokio::sync::Mutex;

use crate::error::{Error, Result};

/// What smelt needs to commit to a REST catalog.
#[derive(Debug)]
pub(crate) struct RestCommits {
    http: reqwest::Client,
    /// `<uri>/v1/` plus the catalog's prefix, if it has one.
    base: String,
    uri: String,
    properties: HashMap<String, String>,
    token: Mutex<Option<String>>,
}

/// How a commit ended.
pub(crate) enum Committed {
    Done(Box<CommitTableResponse>),
    /// The catalog refused the requirements: another writer committed first.
    Conflict,
}

impl RestCommits {
    /// For the catalog at `uri` with the catalog properties `properties` (`warehouse`,
    /// `token`, `credential`, `oauth2-server-uri`, `scope`, `prefix`).
    pub(crate) async fn new(
        uri: &str,
        properties: HashMap<String, String>,
        client: reqwest::Client,
    ) -> Result<Self> {
        let mut rest = RestCommits {
            http: client,
            base: format!("{uri}/v1/"),
            uri: uri.to_string(),
            token: Mutex::new(properties.get("token").cloned()),
            properties,
        };
        // The catalog's configuration may add a prefix to every path.
        let mut config = rest.http.get(format!("{uri}/v1/config"));
        if let Some(w) = rest.properties.get("warehouse") {
            config = config.query(&[("warehouse", w)]);
        }
        let config = rest.authorized(config).await?;
        let response = config.send().await.map_err(|e| http(uri, e))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| http(uri, e))?;
        if !status.is_success() {
            return Err(Error::user(
                format!(
                    "REST catalog {uri}: reading its configuration failed ({status}): {}",
                    text.trim()
                ),
                if status.is_server_error() {
                    "the catalog failed on its side: check its log and run again"
                } else {
                    "check the catalog's `uri`, `warehouse` and credentials"
                },
            ));
        }
        let body: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            Error::user(
                format!("REST catalog {uri}: its configuration is not JSON ({e})"),
                "check that `uri` is the catalog's base URL (the one that serves /v1/config)",
            )
        })?;
        let prefix = body["overrides"]["prefix"]
            .as_str()
            .or(body["defaults"]["prefix"].as_str())
            .map(str::to_string)
            .or_else(|| rest.properties.get("prefix").cloned());
        if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
            rest.base = format!("{uri}/v1/{}/", prefix.trim_matches('/'));
        }
        Ok(rest)
    }

    /// `request` with the catalog's bearer token, fetched once with the client credentials
    /// when no `token` was given.
    async fn authorized(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder> {
        let mut token = self.token.lock().await;
        if token.is_none()
            && let Some(credential) = self.properties.get("credential")
        {
            let (id, secret) = credential.split_once(':').unwrap_or(("", credential));
            let url = self
                .properties
                .get("oauth2-server-uri")
                .cloned()
                .unwrap_or_else(|| format!("{}/v1/oauth/tokens", self.uri));
            let scope = self
                .properties
                .get("scope")
                .map_or("catalog", String::as_str);
            let form = [
                ("grant_type", "client_credentials"),
                ("client_id", id),
                ("client_secret", secret),
                ("scope", scope),
            ];
            let response = self
                .http
                .post(&url)
                .form(&form)
                .send()
                .await
                .map_err(|e| http(&url, e))?;
            let status = response.status();
            let text = response.text().await.map_err(|e| http(&url, e))?;
            let body: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let Some(access) = body["access_token"]
                .as_str()
                .filter(|_| status.is_success())
            else {
                return Err(Error::user(
                    format!(
                        "REST catalog {}: no token for the credential given ({status}): {}",
                        self.uri,
                        text.trim()
                    ),
                    if status.is_server_error() {
                        "the catalog failed on its side: check its log and run again"
                    } else {
                        "check `credential` (client id and secret, as `id:secret`)"
                    },
                ));
            };
            *token = Some(access.to_string());
        }
        Ok(match token.as_deref() {
            Some(t) => request.bearer_auth(t),
            None => request,
        })
    }

    /// Sends `updates` for table `name`, to be applied only if `requirements` hold.
    pub(crate) async fn commit(
        &self,
        name: &TableName,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<Committed> {
        let namespace = ident.namespace().join("\u{1f}");
        let mut url = reqwest::Url::parse(&self.base).map_err(|e| {
            Error::user(
                format!("REST catalog {}: {e}", self.uri),
                "check the catalog's `uri`",
            )
        })?;
        url.path_segments_mut()
            .map_err(|()| {
                Error::user(
                    format!("REST catalog {}: not a base URL", self.uri),
                    "check the catalog's `uri`",
                )
            })?
            .pop_if_empty()
            .extend(["namespaces", &namespace, "tables", ident.name()]);
        let body = CommitTableRequest {
            identifier: Some(ident.clone()),
            requirements,
            updates,
        };
        let request = self
            .authorized(self.http.post(url.clone()).json(&body))
            .await?;
        // Sent, and no answer: the catalog may have applied it.
        let unknown = |what: String| {
            Error::user(
                format!("`{name}`: {what}, so whether the commit landed is unknown"),
                "run again: a rerun finds the commit by its watermark if it landed, and applies the changes once if it did not",
            )
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Err(unknown(format!(
                    "the REST catalog did not answer the commit in time ({e})"
                )));
            }
            Err(e) => return Err(http(url.as_str(), e)),
        };
        let status = response.status();
        if status == reqwest::StatusCode::CONFLICT {
            return Ok(Committed::Conflict);
        }
        // The REST protocol: a 5xx to a commit leaves its state unknown.
        if status.is_server_error() {
            let text = response.text().await.unwrap_or_default();
            return Err(unknown(format!(
                "the REST catalog answered the commit with {status} ({})",
                text.trim()
            )));
        }
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(Error::user(
                format!("`{name}`: the REST catalog refused the commit ({status}): {text}"),
                "nothing was committed; check the catalog's log, then run again",
            ));
        }
        let done: CommitTableResponse = response.json().await.map_err(|e| http(url.as_str(), e))?;
        Ok(Committed::Done(Box::new(done)))
    }
}

fn http(url: &str, e: reqwest::Error) -> Error {
    Error::user(
        format!("REST catalog request to {url} failed: {e}"),
        if e.is_timeout() {
            "the catalog did not answer within `storage.timeout`: check that it is up at its `uri`, or raise `storage.timeout` in the pipeline file"
        } else {
            "check that the catalog is reachable at its `uri`"
        },
    )
}
