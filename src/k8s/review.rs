//! Authentication and authorisation of `/metrics` scrapes against the API server, as
//! controller-runtime's `WithAuthenticationAndAuthorization` filter (GIE's
//! `--metrics-endpoint-auth`): the bearer token goes to a TokenReview; an authenticated user
//! is then checked with a SubjectAccessReview for verb `get` on the non-resource URL
//! `/metrics`. Verdicts are cached briefly, keyed by a SHA-256 of the token (the token itself
//! is not kept): allowed for 60 s, denied for 10 s, API errors not at all. The cache holds
//! at most [`CACHE_ENTRIES`] tokens; when full, expired entries go, and if none has expired
//! the cache starts over, so memory stays bounded whatever scrapers send.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::error::K8sError;

/// Most cached verdicts.
pub const CACHE_ENTRIES: usize = 1024;
/// How long an allowed verdict is reused.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a denied verdict is reused.
pub const DENIED_TTL: Duration = Duration::from_secs(10);

/// The outcome for one token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Authenticated and allowed to `get /metrics`.
    Allowed,
    /// The token is not valid (HTTP 401).
    Unauthenticated,
    /// Valid, but the user may not `get /metrics` (HTTP 403).
    Forbidden,
}

/// Reviews tokens for `/metrics`.
pub struct MetricsReviewer {
    client: kube::Client,
    cache: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
}

impl std::fmt::Debug for MetricsReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsReviewer").finish_non_exhaustive()
    }
}

impl MetricsReviewer {
    /// A reviewer calling the API server through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client, cache: Mutex::new(HashMap::new()) }
    }

    /// The verdict for `token` (cached, or a TokenReview and a SubjectAccessReview).
    pub async fn review(&self, token: &str) -> Result<Verdict, K8sError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.ask(token).await?;
        self.remember(key, verdict);
        Ok(verdict)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Verdict> {
        let cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.get(key).filter(|(_, until)| Instant::now() < *until).map(|(v, _)| *v)
    }

    fn remember(&self, key: [u8; 32], verdict: Verdict) {
        let ttl = if verdict == Verdict::Allowed { ALLOWED_TTL } else { DENIED_TTL };
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= CACHE_ENTRIES {
            cache.retain(|_, (_, until)| now < *until);
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
        }
        cache.insert(key, (verdict, now + ttl));
    }

    async fn ask(&self, token: &str) -> Result<Verdict, K8sError> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), ..TokenReviewSpec::default() },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(K8sError::Api)?;
        let status = reviewed.status.unwrap_or_default();
        let user = match status.user {
            Some(user) if status.authenticated == Some(true) => user,
            _ => return Ok(Verdict::Unauthenticated),
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(K8sError::Api)?;
        let allowed = decided.status.is_some_and(|s| s.allowed);
        Ok(if allowed { Verdict::Allowed } else { Verdict::Forbidden })
    }
}
