//! The default holder id.

use leasehold_core::HolderId;

/// `host:pid:suffix`: the host name (from `/etc/hostname` or `HOSTNAME`, else `localhost`), the
/// process id and a random suffix, so two processes (or two services in one process) are always
/// two holders.
pub(crate) fn default_holder_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|s| !s.trim().is_empty())
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let host: String = host.chars().take(200).collect();
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Validates a holder id.
pub(crate) fn holder(id: Option<String>) -> Result<HolderId, leasehold_core::ValidationError> {
    HolderId::new(id.unwrap_or_else(default_holder_id))
}
