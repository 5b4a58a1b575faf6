//! The extension point of a service: each family (locks, tasks, …) keeps the state it needs per
//! service here, keyed by the state's type and made by the family on first use, so the
//! service's own state names no family.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

type Entry = Arc<dyn Any + Send + Sync>;

/// A map from a state's type to the one value of that type this service keeps.
#[derive(Default)]
pub(crate) struct Extensions(RwLock<HashMap<TypeId, Entry>>);

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self.0.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Extensions")
            .field("kinds", &map.len())
            .finish()
    }
}

impl Extensions {
    /// The value of type `T`, made with `T::default()` the first time it is asked for.
    pub(crate) fn get<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let found = self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&TypeId::of::<T>())
            .cloned();
        let entry = match found {
            Some(entry) => entry,
            None => {
                let mut map = self.0.write().unwrap_or_else(PoisonError::into_inner);
                let entry = map
                    .entry(TypeId::of::<T>())
                    .or_insert_with(|| Arc::new(T::default()));
                Arc::clone(entry)
            }
        };
        match entry.downcast::<T>() {
            Ok(value) => value,
            // The map is keyed by the value's type: every entry of `T`'s key is a `T`.
            Err(_) => unreachable!("an extension stored under another type's key"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_per_type_made_on_first_use() {
        let ext = Extensions::default();
        let a = ext.get::<std::sync::Mutex<u32>>();
        *a.lock().expect("lock") = 7;
        assert_eq!(*ext.get::<std::sync::Mutex<u32>>().lock().expect("lock"), 7);
        assert_eq!(*ext.get::<std::sync::Mutex<u64>>().lock().expect("lock"), 0);
    }
}
