//! Opening an object store at a URL, as every adapter that reads or writes files there
//! does (Iceberg's files, landings, export targets; delta-rs opens the lake's own):
//! credentials from the environment, as the cloud SDKs read them (`AWS_*`, `GOOGLE_*`,
//! `AZURE_*`), timeouts and retries from the pipeline's `storage:`.

use std::sync::Arc;

use object_store::{ObjectStore, ObjectStoreScheme, RetryConfig};
use smelt_spec::StoreSettings;
use url::Url;

/// The store holding `url` (its bucket or container; a local file system for `file://`,
/// the server's root for `http(s)://`), and the object path `url` names in it.
pub fn open_store(
    url: &Url,
    settings: &StoreSettings,
) -> Result<(Arc<dyn ObjectStore>, object_store::path::Path), object_store::Error> {
    let (scheme, path) = ObjectStoreScheme::parse(url)?;
    let retry = RetryConfig {
        max_retries: settings.retries,
        retry_timeout: settings.retry_timeout,
        ..RetryConfig::default()
    };
    let text = url.as_str();
    // The client options' names parse as each builder's own keys.
    macro_rules! configured {
        ($builder:expr) => {{
            let mut builder = $builder.with_retry(retry);
            for (key, value) in settings.client_options() {
                builder = builder.with_config(key.parse()?, value);
            }
            Arc::new(builder.build()?) as Arc<dyn ObjectStore>
        }};
    }
    let store = match scheme {
        ObjectStoreScheme::Local => Arc::new(object_store::local::LocalFileSystem::new()) as _,
        ObjectStoreScheme::Memory => Arc::new(object_store::memory::InMemory::new()) as _,
        ObjectStoreScheme::AmazonS3 => {
            configured!(object_store::aws::AmazonS3Builder::from_env().with_url(text))
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            configured!(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(text))
        }
        ObjectStoreScheme::MicrosoftAzure => {
            configured!(object_store::azure::MicrosoftAzureBuilder::from_env().with_url(text))
        }
        ObjectStoreScheme::Http => configured!(
            object_store::http::HttpBuilder::new().with_url(url.origin().ascii_serialization())
        ),
        other => {
            return Err(object_store::Error::NotSupported {
                source: format!("{other:?} stores are not supported").into(),
            });
        }
    };
    Ok((store, path))
}

/// A store that refused smelt or did not answer: what is fixed outside smelt and its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFault {
    /// The store refused the credentials (401, 403).
    Credentials,
    /// No answer within `storage.timeout`.
    Timeout,
    /// No connection to the endpoint (refused, unreachable, unknown host).
    Connect,
}

impl StoreFault {
    /// The fault behind `error`, found in its chain of sources.
    pub fn of(error: &(dyn std::error::Error + 'static)) -> Option<Self> {
        let mut next = Some(error);
        while let Some(e) = next {
            if let Some(
                object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. },
            ) = e.downcast_ref::<object_store::Error>()
            {
                return Some(StoreFault::Credentials);
            }
            if let Some(e) = e.downcast_ref::<object_store::client::HttpError>() {
                use object_store::client::HttpErrorKind;
                match e.kind() {
                    HttpErrorKind::Timeout => return Some(StoreFault::Timeout),
                    HttpErrorKind::Connect | HttpErrorKind::Request => {
                        return Some(StoreFault::Connect);
                    }
                    _ => {}
                }
            }
            next = e.source();
        }
        None
    }

    /// What to do about it.
    pub fn hint(self) -> &'static str {
        match self {
            StoreFault::Credentials => {
                "the store refused smelt's credentials: check them and their rights on this bucket or container (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, GOOGLE_SERVICE_ACCOUNT, AZURE_STORAGE_ACCOUNT_KEY; see docs/storage.md)"
            }
            StoreFault::Timeout => {
                "the store did not answer in time: check the endpoint (AWS_ENDPOINT_URL, AZURE_STORAGE_ACCOUNT_NAME, …) and the network; `storage.timeout` and `storage.retries` in the pipeline file set how long smelt waits (docs/storage.md)"
            }
            StoreFault::Connect => {
                "nothing answered at the store's endpoint: check the endpoint (AWS_ENDPOINT_URL, AZURE_STORAGE_ACCOUNT_NAME, …) and the network; smelt retried as `storage.retries` and `storage.retry_timeout` allow (docs/storage.md)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_remote_scheme_opens_with_the_settings() {
        let settings = StoreSettings {
            timeout: std::time::Duration::from_secs(2),
            ..StoreSettings::default()
        };
        for url in [
            "s3://bucket/b/a",
            "s3a://bucket/a",
            "gs://bucket/a",
            "abfss://container@account.dfs.core.windows.net/a",
            "https://example.com/landing/a",
        ] {
            let (_, path) = open_store(&Url::parse(url).unwrap(), &settings)
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(path.as_ref().ends_with('a'), "{url}: {path}");
        }
    }
}
