//! AWS credentials and region the way the AWS CLI leaves them, one chain for S3 (object_store)
//! and SQS (the AWS SDK): explicit variables, then the shared files (`~/.aws/credentials`,
//! `~/.aws/config`, the profile `AWS_PROFILE` names: static keys, SSO, `credential_process`,
//! assumed roles), then web identity (EKS), then the ECS container role, and the EC2 instance
//! metadata server only with `SLATE_USE_INSTANCE_METADATA=true`. Nothing here logs a secret.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_config::ecs::EcsCredentialsProvider;
use aws_config::environment::EnvironmentVariableCredentialsProvider;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::meta::credentials::CredentialsProviderChain;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_config::web_identity_token::WebIdentityTokenCredentialsProvider;
use aws_config::Region;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use object_store::aws::AwsCredential;
use object_store::CredentialProvider;

use super::{env, env_true};

/// The one credential chain (see the module documentation).
pub fn chain() -> SharedCredentialsProvider {
    chain_for(None)
}

/// [`chain`] with the shared files' profile `profile` (an rclone remote's `profile`) instead
/// of `AWS_PROFILE`'s.
pub fn chain_for(profile: Option<&str>) -> SharedCredentialsProvider {
    // the region of STS calls (assumed roles, web identity): without one they cannot be made
    let conf = ProviderConfig::default().with_region(Some(Region::new(region())));
    let mut chain = CredentialsProviderChain::first_try(
        "Environment",
        EnvironmentVariableCredentialsProvider::new(),
    )
    .or_else("Profile", {
        let b = ProfileFileCredentialsProvider::builder().configure(&conf);
        match profile {
            Some(p) => b.profile_name(p),
            None => b,
        }
        .build()
    })
    .or_else(
        "WebIdentityToken",
        WebIdentityTokenCredentialsProvider::builder()
            .configure(&conf)
            .build(),
    )
    .or_else(
        "EcsContainer",
        EcsCredentialsProvider::builder().configure(&conf).build(),
    );
    if env_true("SLATE_USE_INSTANCE_METADATA") {
        chain = chain.or_else(
            "Ec2InstanceMetadata",
            ImdsCredentialsProvider::builder().configure(&conf).build(),
        );
    }
    SharedCredentialsProvider::new(chain)
}

/// The shared config and credentials files, as the AWS CLI finds them.
fn shared_files() -> [Option<PathBuf>; 2] {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let config = env("AWS_CONFIG_FILE")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/config")));
    let creds = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".aws/credentials")));
    [config, creds]
}

/// Whether some source of the chain has something to offer (without asking it): explicit
/// keys, a shared file, web identity, a container role or the opted-in instance role.
pub fn has_source() -> bool {
    (env("AWS_ACCESS_KEY_ID").is_some() && env("AWS_SECRET_ACCESS_KEY").is_some())
        || shared_files()
            .iter()
            .flatten()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .any(|text| names_credentials(&text))
        || env("AWS_WEB_IDENTITY_TOKEN_FILE").is_some()
        || env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
        || env_true("SLATE_USE_INSTANCE_METADATA")
}

/// Whether a shared file says anything about credentials (a config file holding only a
/// region does not: then the early "missing credentials" error is the right answer).
fn names_credentials(text: &str) -> bool {
    [
        "aws_access_key_id",
        "role_arn",
        "credential_process",
        "sso_",
        "web_identity_token_file",
        "credential_source",
        "login_session",
    ]
    .iter()
    .any(|k| text.contains(k))
}

/// The profile in use: `AWS_PROFILE`, else `default`.
pub fn profile() -> String {
    env("AWS_PROFILE").unwrap_or_else(|| "default".into())
}

/// The region: `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region` in the shared
/// config file, else `us-east-1`.
pub fn region() -> String {
    if let Some(r) = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")) {
        return r;
    }
    let [config, _] = shared_files();
    config
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|text| profile_value(&text, &profile(), "region"))
        .unwrap_or_else(|| "us-east-1".into())
}

/// `key` of `profile` in an AWS config file (`[default]`, `[profile NAME]`).
fn profile_value(text: &str, profile: &str, key: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.trim();
            let name = section.strip_prefix("profile ").unwrap_or(section).trim();
            inside = name == profile;
            continue;
        }
        if inside {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == key {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

/// The chain as object_store's credential provider, each credential kept until a minute
/// before it expires (the chain's sources read files or ask a server on each call).
#[derive(Debug)]
pub struct SdkCredentials {
    chain: SharedCredentialsProvider,
    cached: Mutex<Option<(Arc<AwsCredential>, Option<SystemTime>)>>,
}

impl SdkCredentials {
    pub fn new() -> SdkCredentials {
        SdkCredentials::for_profile(None)
    }

    /// The chain with the shared files' `profile` (else `AWS_PROFILE`'s).
    pub fn for_profile(profile: Option<String>) -> SdkCredentials {
        SdkCredentials {
            chain: chain_for(profile.as_deref()),
            cached: Mutex::new(None),
        }
    }
}

impl Default for SdkCredentials {
    fn default() -> Self {
        SdkCredentials::new()
    }
}

#[async_trait::async_trait]
impl CredentialProvider for SdkCredentials {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        let fresh = |exp: &Option<SystemTime>| {
            exp.is_none_or(|e| e > SystemTime::now() + Duration::from_secs(60))
        };
        if let Ok(c) = self.cached.lock() {
            if let Some((cred, exp)) = c.as_ref() {
                if fresh(exp) {
                    return Ok(cred.clone());
                }
            }
        }
        let c =
            self.chain
                .provide_credentials()
                .await
                .map_err(|e| object_store::Error::Generic {
                    store: "S3",
                    source: format!(
                        "no AWS credentials (environment, profile '{}' of the shared files, web \
                     identity, container role{}): {}",
                        profile(),
                        if env_true("SLATE_USE_INSTANCE_METADATA") {
                            ", instance role"
                        } else {
                            ""
                        },
                        causes(&e)
                    )
                    .into(),
                })?;
        let cred = Arc::new(AwsCredential {
            key_id: c.access_key_id().to_string(),
            secret_key: c.secret_access_key().to_string(),
            token: c.session_token().map(str::to_string),
        });
        if let Ok(mut slot) = self.cached.lock() {
            *slot = Some((cred.clone(), c.expiry()));
        }
        Ok(cred)
    }
}

/// An error with its causes, on one line.
fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        out.push_str(": ");
        out.push_str(&c.to_string());
        next = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_profiles_region_from_the_config_file() {
        let text = "\
[default]
region = eu-west-1
# a comment
[profile team]
output = json
region=ap-south-1

[sso-session corp]
region = us-west-2
";
        assert_eq!(
            profile_value(text, "default", "region").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            profile_value(text, "team", "region").as_deref(),
            Some("ap-south-1")
        );
        assert_eq!(profile_value(text, "team", "missing"), None);
        assert_eq!(profile_value(text, "other", "region"), None);
    }
}
