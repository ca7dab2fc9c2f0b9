//! What each callsite is to the layer, worked out once: span names → roles
//! ([`Names`]), packed per callsite in a [`Class`] and cached in a lock-free
//! table keyed by the callsite's metadata address ([`CallsiteCache`]).

use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use tracing_core::Metadata;

use crate::stage::Stage;

/// What a tracked span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Call,
    Stage(Stage),
    /// A server's request handler, run under a remote parent (the caller's
    /// trace context): calls made inside continue that trace.
    Remote,
}

/// Name of the span a server runs a request's handler in when the request
/// carried a valid trace context (see
/// [`remote_parent_span`](crate::remote_parent_span)): calls
/// and transport spans inside it continue the caller's trace.
pub const REMOTE_PARENT_SPAN: &str = "remote_parent";

/// Span names → roles, fixed at build time.
#[derive(Debug)]
pub(crate) struct Names {
    pub(crate) call: String,
    /// Name → stage; user mappings first, then the defaults.
    pub(crate) stages: Vec<(String, Stage)>,
    /// What each callsite is, worked out once when it registers.
    pub(crate) callsites: CallsiteCache,
}

impl Names {
    pub(crate) fn new(call: String, stages: Vec<(String, Stage)>) -> Self {
        Names {
            call,
            stages,
            callsites: CallsiteCache::new(),
        }
    }

    #[inline]
    fn role(&self, name: &str) -> Option<Role> {
        if name == self.call {
            return Some(Role::Call);
        }
        if name == REMOTE_PARENT_SPAN {
            return Some(Role::Remote);
        }
        self.stages
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| Role::Stage(*s))
    }

    pub(crate) fn role_of_value(&self, value: &str) -> Option<Role> {
        if value == self.call || value == "call" {
            return Some(Role::Call);
        }
        value.parse().ok().map(Role::Stage)
    }

    /// Works out what spans of this callsite are, from the name and fields.
    fn classify(&self, meta: &Metadata<'_>) -> Class {
        if !meta.is_span() {
            return Class::IGNORED;
        }
        Class::new(
            self.role(meta.name()),
            meta.fields().field("stage").is_some(),
        )
    }

    /// [`classify`](Self::classify), cached per callsite: one table probe
    /// for a registered callsite instead of string compares.
    #[inline]
    pub(crate) fn class(&self, meta: &Metadata<'_>) -> Class {
        match self.callsites.get(meta) {
            Some(c) => c,
            None => self.classify(meta),
        }
    }

    /// Called once per callsite (`register_callsite` / `callsite_enabled`).
    pub(crate) fn register(&self, meta: &'static Metadata<'static>) -> Class {
        let class = self.classify(meta);
        self.callsites.insert(meta, class);
        class
    }
}

/// What the layer makes of a callsite: its role by name, and whether a
/// `stage` field may override it. Packed in one byte for [`CallsiteCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Class(u8);

impl Class {
    const PRESENT: u8 = 0x80;
    const STAGE_FIELD: u8 = 0x40;
    /// 0: none, 1: call, 2: remote parent, 3 + i: stage `i`.
    const ROLE: u8 = 0x0f;
    const IGNORED: Class = Class(Self::PRESENT);

    fn new(role: Option<Role>, stage_field: bool) -> Self {
        let r = match role {
            None => 0,
            Some(Role::Call) => 1,
            Some(Role::Remote) => 2,
            Some(Role::Stage(s)) => 3 + s.index() as u8,
        };
        Class(Self::PRESENT | if stage_field { Self::STAGE_FIELD } else { 0 } | r)
    }

    #[inline]
    pub(crate) fn role(self) -> Option<Role> {
        match self.0 & Self::ROLE {
            0 => None,
            1 => Some(Role::Call),
            2 => Some(Role::Remote),
            r => Stage::ALL.get(usize::from(r - 3)).copied().map(Role::Stage),
        }
    }

    #[inline]
    pub(crate) fn stage_field(self) -> bool {
        self.0 & Self::STAGE_FIELD != 0
    }

    #[inline]
    pub(crate) fn interesting(self) -> bool {
        self.0 & (Self::STAGE_FIELD | Self::ROLE) != 0
    }
}

/// Slots in the callsite table (a power of two); callsites beyond it are
/// classified on every span instead (correct, only slower).
const CALLSITE_SLOTS: usize = 1024;
/// Slots probed per lookup.
const CALLSITE_PROBES: usize = 16;

/// A fixed-size, lock-free, insert-only map from a callsite's `'static`
/// metadata address to its [`Class`]: filled when callsites register,
/// read on every span. No allocation after build.
pub(crate) struct CallsiteCache {
    keys: Box<[AtomicUsize]>,
    classes: Box<[AtomicU8]>,
}

impl fmt::Debug for CallsiteCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let used = self
            .keys
            .iter()
            .filter(|k| k.load(Ordering::Relaxed) != 0)
            .count();
        f.debug_struct("CallsiteCache")
            .field("callsites", &used)
            .finish()
    }
}

impl CallsiteCache {
    fn new() -> Self {
        CallsiteCache {
            keys: (0..CALLSITE_SLOTS).map(|_| AtomicUsize::new(0)).collect(),
            classes: (0..CALLSITE_SLOTS).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    #[inline]
    fn slot(key: usize, probe: usize) -> usize {
        // Fibonacci hashing of the address; metadata is at least 8-aligned.
        let h = ((key >> 3) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54;
        (h as usize).wrapping_add(probe) & (CALLSITE_SLOTS - 1)
    }

    #[inline]
    fn get(&self, meta: &Metadata<'_>) -> Option<Class> {
        let key = meta as *const Metadata<'_> as usize;
        for probe in 0..CALLSITE_PROBES {
            let i = Self::slot(key, probe);
            let k = self.keys.get(i)?.load(Ordering::Acquire);
            if k == key {
                let c = self.classes.get(i)?.load(Ordering::Acquire);
                // 0: the inserting thread has not stored the class yet.
                return (c & Class::PRESENT != 0).then_some(Class(c));
            }
            if k == 0 {
                return None;
            }
        }
        None
    }

    fn insert(&self, meta: &'static Metadata<'static>, class: Class) {
        let key = meta as *const Metadata<'static> as usize;
        for probe in 0..CALLSITE_PROBES {
            let i = Self::slot(key, probe);
            let (Some(k), Some(c)) = (self.keys.get(i), self.classes.get(i)) else {
                return;
            };
            match k.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    c.store(class.0, Ordering::Release);
                    return;
                }
                Err(existing) if existing == key => {
                    c.store(class.0, Ordering::Release);
                    return;
                }
                Err(_) => {}
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tracing_core::subscriber::Interest;

    fn names() -> Names {
        let stages = Stage::ALL
            .iter()
            .map(|s| (s.name().to_owned(), *s))
            .collect();
        Names::new("call".to_owned(), stages)
    }

    #[test]
    fn callsite_classes_are_cached_and_match_classification() {
        let dispatch = tracing::Dispatch::new(tracing_subscriber::registry());
        let metas: Vec<&'static Metadata<'static>> =
            tracing::dispatcher::with_default(&dispatch, || {
                vec![
                    tracing::info_span!("call").metadata().unwrap(),
                    tracing::info_span!("transport").metadata().unwrap(),
                    tracing::info_span!("other").metadata().unwrap(),
                    tracing::info_span!("other", stage = "infer")
                        .metadata()
                        .unwrap(),
                ]
            });
        let names = names();
        for &m in &metas {
            let fresh = names.classify(m);
            // Before registration: computed, not cached.
            assert_eq!(names.callsites.get(m), None);
            assert_eq!(names.class(m), fresh);
            assert_eq!(names.register(m), fresh);
            assert_eq!(names.callsites.get(m), Some(fresh));
            assert_eq!(names.class(m), fresh);
        }
        let c = |i: usize| names.class(metas[i]);
        assert_eq!(c(0).role(), Some(Role::Call));
        assert_eq!(c(1).role(), Some(Role::Stage(Stage::Transport)));
        assert_eq!(c(2).role(), None);
        assert!(!c(2).interesting());
        assert!(c(3).stage_field() && c(3).interesting() && c(3).role().is_none());
    }

    #[test]
    fn a_full_callsite_table_falls_back_to_classifying() {
        // More callsites than probes can place in one neighbourhood: every
        // lookup still returns the right class (cached or computed).
        let names = names();
        let metas: Vec<&'static Metadata<'static>> = (0..CALLSITE_SLOTS + 64)
            .map(|i| {
                let name: &'static str = match i % 3 {
                    0 => "capture",
                    1 => "call",
                    _ => Box::leak(format!("span{i}").into_boxed_str()),
                };
                let meta: &'static Metadata<'static> = Box::leak(Box::new(Metadata::new(
                    name,
                    "test",
                    tracing::Level::INFO,
                    None,
                    None,
                    None,
                    tracing_core::field::FieldSet::new(&[], tracing_core::identify_callsite!(&CS)),
                    tracing_core::metadata::Kind::SPAN,
                )));
                meta
            })
            .collect();
        for &m in &metas {
            names.register(m);
        }
        let cached = metas
            .iter()
            .filter(|m| names.callsites.get(m).is_some())
            .count();
        assert!(cached > CALLSITE_SLOTS / 2 && cached <= CALLSITE_SLOTS);
        for (i, &m) in metas.iter().enumerate() {
            let want = match i % 3 {
                0 => Some(Role::Stage(Stage::Capture)),
                1 => Some(Role::Call),
                _ => None,
            };
            assert_eq!(names.class(m), Class::new(want, false), "{i}");
        }
    }

    struct TestCallsite;
    static CS: TestCallsite = TestCallsite;
    impl tracing_core::Callsite for TestCallsite {
        fn set_interest(&self, _: Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!("not registered")
        }
    }
}
