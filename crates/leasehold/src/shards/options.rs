//! What sharded tasks are told: the names to spread ([`NameSource`]) and how they run
//! ([`ShardOptions`]).

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{FencingToken, LeaseConfig, LossReason};
use tokio_util::sync::CancellationToken;

pub(crate) type OnAcquired = Arc<dyn Fn(&str, FencingToken, CancellationToken) + Send + Sync>;
pub(crate) type OnLost = Arc<dyn Fn(&str, LossReason) + Send + Sync>;
type NameFn = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// The shard group used when [`ShardOptions::group`] is not set.
pub const DEFAULT_SHARD_GROUP: &str = "default";

/// The names a [`ShardedTasks`](crate::ShardedTasks) spreads: a fixed list (replace it with
/// [`ShardedTasks::set_names`](crate::ShardedTasks::set_names)) or a closure asked at every refresh.
///
/// # Examples
/// ```
/// use leasehold::shards::NameSource;
/// let fixed = NameSource::from(vec!["orders/eu", "orders/us"]);
/// let dynamic = NameSource::from_fn(|| (0..10).map(|i| format!("partition-{i}")).collect());
/// # let _ = (fixed, dynamic);
/// ```
#[derive(Clone)]
pub struct NameSource(Names);

#[derive(Clone)]
enum Names {
    Fixed(Vec<String>),
    Dynamic(NameFn),
}

impl std::fmt::Debug for NameSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Names::Fixed(names) => f.debug_tuple("Fixed").field(&names.len()).finish(),
            Names::Dynamic(_) => f.write_str("Dynamic"),
        }
    }
}

impl NameSource {
    /// A fixed list of names.
    ///
    /// # Examples
    /// ```
    /// let names = leasehold::shards::NameSource::fixed(["a", "b"]);
    /// # let _ = names;
    /// ```
    pub fn fixed<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self(Names::Fixed(names.into_iter().map(Into::into).collect()))
    }

    /// Names asked from `f` at every refresh (on the engine thread: keep it quick).
    ///
    /// # Examples
    /// ```
    /// let names = leasehold::shards::NameSource::from_fn(|| vec!["a".to_owned()]);
    /// # let _ = names;
    /// ```
    pub fn from_fn(f: impl Fn() -> Vec<String> + Send + Sync + 'static) -> Self {
        Self(Names::Dynamic(Arc::new(f)))
    }

    pub(crate) fn names(&self) -> Vec<String> {
        match &self.0 {
            Names::Fixed(names) => names.clone(),
            Names::Dynamic(f) => f(),
        }
    }
}

impl From<Vec<String>> for NameSource {
    fn from(names: Vec<String>) -> Self {
        Self::fixed(names)
    }
}

impl From<Vec<&str>> for NameSource {
    fn from(names: Vec<&str>) -> Self {
        Self::fixed(names)
    }
}

impl From<&[&str]> for NameSource {
    fn from(names: &[&str]) -> Self {
        Self::fixed(names.iter().copied())
    }
}

/// How sharded lease tasks run: per-name callbacks, the configuration, the refresh interval
/// and the shard group.
///
/// Callbacks run on the service's engine thread: keep them short and non-blocking.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use leasehold::shards::ShardOptions;
/// let options = ShardOptions::new()
///     .on_acquired(|name, token, cancel| {
///         println!("{name}: mine now (token {token})");
///         drop(cancel); // hand it to the work: cancelled when the tenure ends
///     })
///     .on_lost(|name, reason| println!("{name}: lost ({reason:?})"))
///     .refresh_interval(Duration::from_secs(2))
///     .group("reports");
/// # let _ = options;
/// ```
#[derive(Clone)]
#[must_use]
pub struct ShardOptions {
    pub(crate) on_acquired: Option<OnAcquired>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) config: Option<LeaseConfig>,
    pub(crate) refresh: Option<Duration>,
    pub(crate) group: String,
}

impl Default for ShardOptions {
    fn default() -> Self {
        Self {
            on_acquired: None,
            on_lost: None,
            config: None,
            refresh: None,
            group: DEFAULT_SHARD_GROUP.to_owned(),
        }
    }
}

impl std::fmt::Debug for ShardOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardOptions")
            .field("on_acquired", &self.on_acquired.is_some())
            .field("on_lost", &self.on_lost.is_some())
            .field("config", &self.config)
            .field("refresh", &self.refresh)
            .field("group", &self.group)
            .finish()
    }
}

impl ShardOptions {
    /// No callbacks, the service's configuration, refresh every third of the term, group
    /// [`DEFAULT_SHARD_GROUP`].
    ///
    /// # Examples
    /// ```
    /// let options = leasehold::shards::ShardOptions::new();
    /// # let _ = options;
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Called at the start of every tenure of a name, with the name, its fencing token and a
    /// [`CancellationToken`] cancelled when the tenure ends (including when the name moves to
    /// another host).
    ///
    /// # Examples
    /// ```
    /// let options = leasehold::shards::ShardOptions::new().on_acquired(|name, token, _cancel| {
    ///     println!("{name}: token {token}");
    /// });
    /// # let _ = options;
    /// ```
    pub fn on_acquired(
        mut self,
        f: impl Fn(&str, FencingToken, CancellationToken) + Send + Sync + 'static,
    ) -> Self {
        self.on_acquired = Some(Arc::new(f));
        self
    }

    /// Called when the tenure of a name is lost (not when it is released because it moved).
    ///
    /// # Examples
    /// ```
    /// let options = leasehold::shards::ShardOptions::new().on_lost(|name, reason| eprintln!("{name}: {reason:?}"));
    /// # let _ = options;
    /// ```
    pub fn on_lost(mut self, f: impl Fn(&str, LossReason) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(f));
        self
    }

    /// The configuration of every name and of the membership lease (default: the service's).
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let options = leasehold::shards::ShardOptions::new()
    ///     .config(leasehold::LeaseConfig::default().with_term(Duration::from_secs(5)));
    /// # let _ = options;
    /// ```
    pub fn config(mut self, config: LeaseConfig) -> Self {
        self.config = Some(config);
        self
    }

    /// How often the live members are read (default: a third of the term). A host that died
    /// is dropped from the ring within term + refresh. A host that joined or left gracefully
    /// rings the group's bell on the service's doorbell, and the members spread the names over
    /// it at once; without a doorbell (or if the ring is missed) within one refresh.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// let options = leasehold::shards::ShardOptions::new().refresh_interval(Duration::from_millis(500));
    /// # let _ = options;
    /// ```
    pub fn refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh = Some(interval);
        self
    }

    /// The shard group (default [`DEFAULT_SHARD_GROUP`]): hosts of one group in one namespace
    /// share a ring. Must not be empty nor contain `/`.
    ///
    /// # Examples
    /// ```
    /// let options = leasehold::shards::ShardOptions::new().group("billing");
    /// # let _ = options;
    /// ```
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }
}
