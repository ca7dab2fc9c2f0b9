//! The spans entered on this thread, as the layer saw them enter and exit,
//! so a stage opened inside a call or a stage finds where its time goes
//! without asking the registry for the current span (its thread-local
//! stack, a slab reference of the span and two atomics) and without a look
//! at the parent's state (a table probe and a slot lock).
//!
//! When a tracked span (a call, a stage) opens, the layer notes where a
//! stage inside it goes ([`opened`]); its first enter on this thread pushes
//! that as a *known* entry. While a known entry is on the stack, every
//! other span entered on the thread is pushed too (an *unknown* entry: the
//! app's own span, or a tracked span entered again), so a known entry on
//! top is the registry's current span. A new stage takes the shortcut only
//! then ([`current`]); in every other case (an app span on top, nothing
//! known on the stack, a stack too deep) it asks the registry as before.
//! A known entry is a span's first enter after it opened, so it is never a
//! span entered again (which the registry does not make current).
//!
//! The app's own spans entered while no known entry is on the thread's
//! stack (outside any call on this thread) are not recorded: their enter
//! and exit cost a thread-local read and two compares.
//!
//! Only a layer that sees every span enter (`build()`, a plain layer) keeps
//! it; behind a per-layer filter the app's own spans do not reach the layer.
//! One fixed stack per thread, owned by the first layer that pushes a known
//! entry on it while it is empty (another layer on the thread, in another
//! subscriber, asks its registry). Bounded: past [`DEPTH`] entered spans
//! the thread stops recording and asks the registry until the stack is that
//! shallow again. Registry ids carry the slab slot's generation, so an id is
//! not reused by another span for a very long time: a pending open that
//! outlives its span matches no later span.

use std::cell::Cell;

use super::span_state::Enclosing;

/// Entered spans kept per thread (deeper nesting falls back to the registry).
const DEPTH: usize = 32;

struct Stack {
    /// The layer whose spans the entries are (0: none yet).
    owner: Cell<usize>,
    ids: [Cell<u64>; DEPTH],
    /// Where a stage opened inside entry `i` goes, when bit `i` of `known`
    /// is set.
    children: [Cell<Enclosing>; DEPTH],
    known: Cell<u32>,
    len: Cell<usize>,
    /// Spans entered past `DEPTH`, not recorded.
    spilled: Cell<usize>,
    /// The tracked span last opened on this thread (its id, its layer), and
    /// where a stage inside it goes: for its first enter.
    pending: Cell<(u64, usize)>,
    pending_child: Cell<Enclosing>,
}

const NO_CHILD: Enclosing = Enclosing {
    call: None,
    nested: false,
    in_service: false,
};

thread_local! {
    static STACK: Stack = const {
        Stack {
            owner: Cell::new(0),
            ids: [const { Cell::new(0) }; DEPTH],
            children: [const { Cell::new(NO_CHILD) }; DEPTH],
            known: Cell::new(0),
            len: Cell::new(0),
            spilled: Cell::new(0),
            pending: Cell::new((0, 0)),
            pending_child: Cell::new(NO_CHILD),
        }
    };
}

/// A tracked span `id` of the layer tagged `tag` opened on this thread; a
/// stage inside it goes to `child` (`None`: look at its state).
#[inline]
pub(crate) fn opened(tag: usize, id: u64, child: Option<Enclosing>) {
    let _ = STACK.try_with(|s| match child {
        Some(child) => {
            s.pending.set((id, tag));
            s.pending_child.set(child);
        }
        None => s.pending.set((0, 0)),
    });
}

/// Span `id` was entered on this thread.
#[inline]
pub(crate) fn enter(tag: usize, id: u64) {
    let _ = STACK.try_with(|s| {
        if s.pending.get().0 == id {
            enter_opened(s, tag, id);
        } else if s.known.get() != 0 && s.owner.get() == tag {
            // Covers the known entries below it.
            push(s, id, false);
        }
        // Else nothing to cover: not recorded.
    });
}

/// [`enter`] of the span last opened on this thread (if it is `tag`'s):
/// its first enter, a known entry.
#[inline(never)]
fn enter_opened(s: &Stack, tag: usize, id: u64) {
    let first = s.pending.get() == (id, tag);
    if first && s.len.get() == 0 && s.spilled.get() == 0 {
        s.owner.set(tag);
    }
    if s.owner.get() == tag && (first || s.known.get() != 0) {
        push(s, id, first);
    }
}

/// Pushes span `id`, known (its child from the pending open) or not.
#[inline]
fn push(s: &Stack, id: u64, known: bool) {
    let len = s.len.get();
    let (Some(id_cell), Some(child_cell), 0) =
        (s.ids.get(len), s.children.get(len), s.spilled.get())
    else {
        s.spilled.set(s.spilled.get() + 1);
        return;
    };
    id_cell.set(id);
    let bit = 1u32 << (len % DEPTH);
    if known {
        s.pending.set((0, 0));
        child_cell.set(s.pending_child.get());
        s.known.set(s.known.get() | bit);
    } else {
        s.known.set(s.known.get() & !bit);
    }
    s.len.set(len + 1);
}

/// Span `id` was exited on this thread.
#[inline]
pub(crate) fn exit(tag: usize, id: u64) {
    let _ = STACK.try_with(|s| {
        let len = s.len.get();
        if len == 0 || s.owner.get() != tag {
            return;
        }
        let top = len - 1;
        match s.ids.get(top) {
            Some(i) if i.get() == id && s.spilled.get() == 0 => {
                s.known.set(s.known.get() & !(1u32 << (top % DEPTH)));
                s.len.set(top);
            }
            _ => exit_below(s, id),
        }
    });
}

/// [`exit`] of a span that is not on top (or of a stack that spilled): the
/// last entry of the span goes, as the registry's stack pops, and the ones
/// above it move down.
#[inline(never)]
fn exit_below(s: &Stack, id: u64) {
    if s.spilled.get() > 0 {
        s.spilled.set(s.spilled.get() - 1);
        return;
    }
    let len = s.len.get().min(DEPTH);
    let Some(at) = (0..len)
        .rev()
        .find(|&i| s.ids.get(i).is_some_and(|c| c.get() == id))
    else {
        return;
    };
    for i in at..len - 1 {
        if let (Some(to), Some(from)) = (s.ids.get(i), s.ids.get(i + 1)) {
            to.set(from.get());
        }
        if let (Some(to), Some(from)) = (s.children.get(i), s.children.get(i + 1)) {
            to.set(from.get());
        }
    }
    let known = s.known.get();
    let below = known & ((1u32 << at) - 1);
    let above = (known >> 1) & !((1u32 << at) - 1);
    s.known.set(below | above);
    s.len.set(len - 1);
}

/// Where a stage opening now on this thread, as a child of the current
/// span, goes, when the layer tagged `tag` knows it without the registry:
/// its current span is a known entry (see the module's doc).
#[inline]
pub(crate) fn current_child(tag: usize) -> Option<Enclosing> {
    STACK
        .try_with(|s| {
            let top = s.len.get().checked_sub(1)?;
            if s.owner.get() != tag
                || s.spilled.get() != 0
                || s.known.get() & (1u32 << (top % DEPTH)) == 0
            {
                return None;
            }
            s.children.get(top).map(Cell::get)
        })
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(nested: bool) -> Enclosing {
        Enclosing {
            call: None,
            nested,
            in_service: false,
        }
    }

    fn nested_now(tag: usize) -> Option<bool> {
        current_child(tag).map(|e| e.nested)
    }

    #[test]
    fn a_known_span_on_top_gives_its_child() {
        // An app span outside any call: not recorded.
        enter(1, 9);
        assert_eq!(nested_now(1), None);
        opened(1, 10, Some(child(false)));
        enter(1, 10);
        assert_eq!(nested_now(1), Some(false));
        opened(1, 11, Some(child(true)));
        enter(1, 11);
        assert_eq!(nested_now(1), Some(true));
        // The app's span inside a stage hides it: ask the registry.
        enter(1, 12);
        assert_eq!(nested_now(1), None);
        exit(1, 12);
        assert_eq!(nested_now(1), Some(true));
        // A span entered again is not known.
        exit(1, 11);
        enter(1, 11);
        assert_eq!(nested_now(1), None);
        exit(1, 11);
        // Another layer on this thread asks its registry.
        assert_eq!(nested_now(2), None);
        exit(1, 10);
        exit(1, 9);
        assert_eq!(nested_now(1), None);
    }

    #[test]
    fn out_of_order_exits_move_the_entries_down() {
        opened(3, 30, Some(child(true)));
        // Another span entered between its open and its enter.
        enter(3, 32);
        enter(3, 30);
        assert_eq!(nested_now(3), Some(true));
        enter(3, 33);
        enter(3, 34);
        exit(3, 33);
        assert_eq!(nested_now(3), None);
        exit(3, 34);
        assert_eq!(nested_now(3), Some(true));
        exit(3, 30);
        exit(3, 32);
        assert_eq!(nested_now(3), None);
    }

    #[test]
    fn too_deep_falls_back_to_the_registry() {
        opened(4, 100, Some(child(false)));
        enter(4, 100);
        for i in 1..DEPTH as u64 + 2 {
            enter(4, 100 + i);
        }
        assert_eq!(nested_now(4), None);
        for i in (1..DEPTH as u64 + 2).rev() {
            exit(4, 100 + i);
        }
        assert_eq!(nested_now(4), Some(false));
        exit(4, 100);
    }
}
