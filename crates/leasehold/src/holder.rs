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

/// The holder ids of the live services of this process: two live services with one holder id
/// would renew, release and fence each other's tenures.
static LIVE: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A holder id claimed by one live service of this process; dropping it frees the id.
#[derive(Debug)]
pub(crate) struct HolderClaim(String);

impl HolderClaim {
    /// Claims `holder` for a new service.
    ///
    /// # Errors
    /// [`crate::Error::HolderInUse`] while another live service of this process has it.
    pub(crate) fn take(holder: &HolderId) -> crate::Result<Self> {
        let mut live = LIVE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !live.insert(holder.as_str().to_owned()) {
            return Err(crate::Error::HolderInUse {
                holder: holder.clone(),
            });
        }
        Ok(Self(holder.as_str().to_owned()))
    }
}

impl Drop for HolderClaim {
    fn drop(&mut self) {
        LIVE.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.0);
    }
}
