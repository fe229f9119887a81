//! The hook process's memory: a bump arena for a process that answers one call and exits. Blocks
//! come from one static region in order, their sizes rounded up to 8 bytes; a block freed or
//! resized while it is the last one given out is taken back or grown in place (most of Rust's
//! temporaries die in that order); any other freed block of 16 B to 4 KiB goes on a free list of
//! its exact rounded size and is the next block of that size given out (a vector's buffer left
//! behind when it grew: without reuse the compound read's top reached twice its live memory, each
//! new page a fault). 8-byte blocks are not listed (one given out from the top can often grow in
//! place, one from a list cannot: listing them cost more copies than it saved; from 16 B the
//! fewer pages touched win, docs/benchmarks.md, session 10), nor larger ones;
//! those are kept until the exit returns everything. What does not fit goes to the system
//! allocator, so the arena has no failure mode of its own. `main.rs` installs it as the global
//! allocator of the `cmdgate-hook` binary only (not of the library's tests or other binaries).
//!
//! Why: a call allocates 140–360 KB in 370–2 800 blocks (`ls -la` to the 400-character compound
//! read). glibc's `malloc`/`free` spent ~65 k–0.5 M instructions on them, and musl's (the hook's
//! static build, `.ci/build-release`) maps and unmaps a region for many of them (~100 `mmap` and
//! `munmap` calls for the compound read). Here an allocation is a list pop or an add, under one
//! compare-and-swap.
//!
//! Safety of the design: every block is a distinct, in-bounds, 8-aligned (or more) range of the
//! region, handed out once until it is freed; a block is only taken back (or resized in place) when
//! it ends exactly at the current top; a freed block is either taken back or put on exactly one
//! free list, whose blocks all lie below the top and are disjoint from every live block, and leaves
//! a list only by being handed out again (its first 8 bytes hold the list's link while it is
//! free). A foreign pointer (not in the region) goes to the system allocator, told apart by
//! address. The state (top and list heads) is behind a try-lock: the hook has one thread, but
//! `GlobalAlloc` must be thread-safe; a call that finds it held (another thread mid-call) does not
//! wait: it allocates from the system allocator, or keeps its freed block until the exit, so there
//! is no deadlock even if a signal handler allocated (the hook's do not). The region is `.bss`:
//! its pages cost nothing until touched, and the peak RSS stays under the goal
//! (docs/benchmarks.md).
#![expect(
    unsafe_code,
    reason = "a global allocator hands out raw memory: `GlobalAlloc` is an unsafe trait, and the \
              region is a static shared through `UnsafeCell`"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// The region's size. The compound read touches well under half of it; what does not fit goes
/// to the system allocator.
pub const SIZE: usize = 1 << 20;

/// Every block's size is rounded up to a multiple of this, and every block starts at a multiple
/// of it: a free block holds its list's link (a `usize`) in its first bytes.
const GRAIN: usize = 8;

/// Freed blocks up to this size (rounded) are kept on free lists for reuse, one list per size.
pub const MAX_LISTED: usize = 4096;

/// Freed blocks smaller than this are not listed: a small block given out from the top can often
/// grow in place (a string or vector being built); one given out from a list cannot. At 64 (until
/// session 10) the compound read's many 16–56-byte strings freed out of order were kept until the
/// exit; from 16 it touches fewer pages (2.7 % faster), the simple cases unchanged or faster,
/// where 8 made them 0.3–0.4 % slower.
pub const MIN_LISTED: usize = 16;

/// The number of free lists: sizes 8, 16, … [`MAX_LISTED`].
const LISTS: usize = MAX_LISTED / GRAIN;

/// The end of a free list. Heads and links hold a block's offset plus one, so an empty arena's
/// state is all zeros and lies in `.bss` with the region it is part of (no `.data` page).
const NIL: usize = 0;

/// The region, page-aligned so every alignment up to a page is met at offset 0, and the state of
/// the arena over it behind its lock. All zeros when empty: a static one is `.bss`.
#[repr(C, align(4096))]
struct Region {
    bytes: UnsafeCell<[u8; SIZE]>,
    locked: AtomicBool,
    state: UnsafeCell<State>,
}

// SAFETY: the bytes of the region are only reached through blocks `Arena` hands out, each to one
// owner at a time, and through free blocks' links, only under the lock; `state` is only reached
// while `locked` is held (`Arena::lock`), by one thread at a time.
unsafe impl Sync for Region {}

/// What the lock guards: the offset of the first free byte, and each free list's first block.
struct State {
    top: usize,
    heads: [usize; LISTS],
}

/// An arena over its own static region (each `Arena` value owns one, so tests can make their
/// own).
pub struct Arena {
    region: &'static Region,
}

/// The region of the process's global allocator.
static GLOBAL: Region = Region {
    bytes: UnsafeCell::new([0; SIZE]),
    locked: AtomicBool::new(false),
    state: UnsafeCell::new(State {
        top: 0,
        heads: [NIL; LISTS],
    }),
};

/// `size` rounded up to [`GRAIN`] (`None` on overflow).
#[inline(always)]
fn rounded(size: usize) -> Option<usize> {
    size.checked_next_multiple_of(GRAIN)
}

/// The free list of blocks of `size` (rounded) bytes, if such blocks are listed.
#[inline(always)]
fn list_of(size: usize) -> Option<usize> {
    // Rounded sizes are multiples of GRAIN and at least GRAIN (layouts are never empty here).
    (MIN_LISTED..=MAX_LISTED)
        .contains(&size)
        .then(|| size / GRAIN - 1)
}

/// The arena's state while its lock is held; released at drop.
struct Held<'a> {
    arena: &'a Arena,
}

impl Held<'_> {
    #[inline(always)]
    fn state(&mut self) -> &mut State {
        // SAFETY: the lock is held by this guard (one at a time), so no other reference to the
        // state exists while this one lives (it borrows the guard mutably).
        unsafe { &mut *self.arena.region.state.get() }
    }
}

impl Drop for Held<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.arena.region.locked.store(false, Ordering::Release);
    }
}

impl Arena {
    /// The global allocator's arena (for `#[global_allocator]` in `main.rs`).
    pub const fn global() -> Arena {
        Arena { region: &GLOBAL }
    }

    /// An arena over a fresh region from the system allocator (tests; leaked: a region lives as
    /// long as the process; its untouched pages cost no memory).
    pub fn leaked() -> Arena {
        let layout = Layout::new::<Region>();
        // SAFETY: `Region` has a non-zero size.
        let raw = unsafe { System.alloc_zeroed(layout) };
        assert!(!raw.is_null(), "no memory for a test region");
        // SAFETY: `raw` is a zeroed block with `Region`'s size and alignment, never freed; zero
        // bytes are a valid `Region`: bytes, an unlocked `AtomicBool`, and an empty state (top
        // 0, every list `NIL`).
        let region: &'static Region = unsafe { &*raw.cast::<Region>() };
        Arena { region }
    }

    /// The state, if no other call holds it (never waits: see the module's comment).
    #[inline(always)]
    fn lock(&self) -> Option<Held<'_>> {
        self.region
            .locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Held { arena: self })
    }

    /// The first byte of the region.
    #[inline(always)]
    fn base(&self) -> *mut u8 {
        self.region.bytes.get().cast::<u8>()
    }

    /// The offset of `ptr` in the region, if it points into it.
    #[inline(always)]
    fn offset(&self, ptr: *mut u8) -> Option<usize> {
        let at = (ptr as usize).wrapping_sub(self.base() as usize);
        (at < SIZE).then_some(at)
    }

    /// How many bytes of the region lie below the top: in use, on free lists, or lost to larger
    /// frees out of order (tests).
    pub fn used(&self) -> usize {
        self.lock().map_or(0, |mut held| held.state().top)
    }

    /// How many blocks are on the free lists (tests).
    pub fn listed(&self) -> usize {
        let Some(mut held) = self.lock() else {
            return 0;
        };
        let heads = held.state().heads;
        let mut n = 0;
        for head in heads {
            let mut at = head;
            while at != NIL {
                n += 1;
                // SAFETY: listed blocks are free blocks of the region, 8-aligned and at least 8
                // bytes long, whose first bytes hold the next link (written by `dealloc`); the
                // lock is held, so no one else reads or writes links.
                at = unsafe { self.base().add(at - 1).cast::<usize>().read() };
            }
        }
        n
    }

    /// A block for `layout` from a free list or the top of the region, or `None` when it does
    /// not fit (or another thread holds the state). Not inlined (nor `give_back` and
    /// `resize_in_place`): inlined into every allocation site they grew the binary by ~150 KB,
    /// more pages to fault in than the calls cost.
    #[inline(never)]
    fn take(&self, layout: Layout) -> Option<*mut u8> {
        let size = rounded(layout.size())?;
        let mut held = self.lock()?;
        let state = held.state();
        if layout.align() <= GRAIN {
            if let Some(list) = list_of(size) {
                let at = state.heads[list];
                if at != NIL {
                    let block = self.base().wrapping_add(at - 1);
                    // SAFETY: `at` heads a free list: a free block of the region of `size` bytes,
                    // 8-aligned, whose first 8 bytes hold the next link; the lock is held.
                    state.heads[list] = unsafe { block.cast::<usize>().read() };
                    return Some(block);
                }
            }
        }
        // The region is page-aligned; `Layout` guarantees a power-of-two alignment.
        let start = state
            .top
            .checked_next_multiple_of(layout.align().max(GRAIN))?;
        let end = start.checked_add(size)?;
        if end > SIZE {
            return None;
        }
        state.top = end;
        // `start + size <= SIZE`: in bounds of the region.
        Some(self.base().wrapping_add(start))
    }

    /// Gives back the region's block at offset `at` of `size` bytes (its layout's, unrounded):
    /// taken back if it ends at the top, else listed by its size, else kept until the exit.
    #[inline(never)]
    fn give_back(&self, at: usize, size: usize) {
        let (Some(size), Some(mut held)) = (rounded(size), self.lock()) else {
            return;
        };
        let state = held.state();
        if at + size == state.top {
            state.top = at;
        } else if let Some(list) = list_of(size) {
            let block = self.base().wrapping_add(at);
            // SAFETY: the caller owned this block of the region (at least `size` >= 8 bytes,
            // 8-aligned: every block starts at a multiple of GRAIN) and gives it up; the lock is
            // held. Its first 8 bytes now hold the list's next link.
            unsafe { block.cast::<usize>().write(state.heads[list]) };
            state.heads[list] = at + 1;
        }
    }

    /// Resizes the region's block at `at` (`old` bytes, unrounded) to `new` bytes in place when it
    /// is the last block and the region has room, or when it keeps its rounded size or shrinks.
    #[inline(never)]
    fn resize_in_place(&self, at: usize, old: usize, new: usize) -> bool {
        let (Some(old), Some(new)) = (rounded(old), rounded(new)) else {
            return false;
        };
        if new <= old {
            // The tail of a shrunk block is lost until the exit (or taken back with it when it is
            // the last block: its rounded end is then below the top).
            if let Some(mut held) = self.lock() {
                let state = held.state();
                if at + old == state.top {
                    state.top = at + new;
                }
            }
            return true;
        }
        let Some(mut held) = self.lock() else {
            return false;
        };
        let state = held.state();
        match at.checked_add(new) {
            Some(end) if at + old == state.top && end <= SIZE => {
                state.top = end;
                true
            }
            _ => false,
        }
    }
}

// SAFETY: `alloc` returns blocks that are in bounds, aligned to `layout.align()`, at least
// `layout.size()` long and disjoint from every other live block: the top only moves past a block
// when it is handed out, and only back over a block that ends at the top and is being freed or
// resized by its owner; a free list only holds blocks their owners gave up, each once, and hands
// each out once. Anything the region cannot serve is the system allocator's, and is given back to
// it (`offset` tells the two apart by address).
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.take(layout) {
            Some(p) => p,
            // SAFETY: the caller's contract for `layout` is `System`'s.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset(ptr) {
            Some(at) => self.give_back(at, layout.size()),
            // SAFETY: not from the region, so `System` gave it out with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Some(at) = self.offset(ptr) {
            if self.resize_in_place(at, layout.size(), new_size) {
                return ptr;
            }
        }
        // SAFETY: the caller guarantees `new_size`, rounded up to `layout.align()`, does not
        // overflow `isize`, so the layout is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_layout` has a non-zero size (the caller's contract for `new_size`).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, disjoint (`new` was just handed out while `ptr` is
            // still owned), and at least `min(old, new)` bytes long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn blocks_are_aligned_disjoint_and_writable() {
        let a = Arena::leaked();
        let mut blocks = Vec::new();
        for (i, (size, align)) in [(1, 1), (24, 8), (3, 2), (100, 64), (7, 4096), (5, 16)]
            .into_iter()
            .enumerate()
        {
            // SAFETY: non-zero sizes.
            let p = unsafe { a.alloc(layout(size, align)) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "alignment {align}");
            assert!(a.offset(p).is_some(), "from the region");
            // SAFETY: the block is `size` bytes long.
            unsafe { std::ptr::write_bytes(p, i as u8 + 1, size) };
            blocks.push((p, size, i as u8 + 1));
        }
        for (p, size, fill) in &blocks {
            // SAFETY: each block is live and `size` long.
            let bytes = unsafe { std::slice::from_raw_parts(*p, *size) };
            assert!(
                bytes.iter().all(|b| b == fill),
                "no block overwrote another"
            );
        }
        let mut ranges: Vec<(usize, usize)> = blocks
            .iter()
            .map(|(p, s, _)| (*p as usize, *p as usize + s))
            .collect();
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "disjoint");
    }

    #[test]
    fn the_last_block_is_taken_back_others_are_kept() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; each pointer freed once with its layout.
        unsafe {
            let x = a.alloc(layout(64, 8));
            let y = a.alloc(layout(64, 8));
            let after_y = a.used();
            a.dealloc(x, layout(64, 8));
            assert_eq!(a.used(), after_y, "x is not the last block: listed");
            assert_eq!(a.listed(), 1);
            a.dealloc(y, layout(64, 8));
            assert_eq!(a.used(), 64, "y was the last block: taken back");
            let z = a.alloc(layout(64, 8));
            assert_eq!(z, x, "the listed block of that size is given out first");
            let w = a.alloc(layout(64, 8));
            assert_eq!(w, y, "then the top's space again");
        }
    }

    #[test]
    fn a_freed_block_is_given_out_again_for_its_rounded_size_only() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; each pointer freed once with its layout.
        unsafe {
            let x = a.alloc(layout(81, 4));
            let keep = a.alloc(layout(8, 8));
            a.dealloc(x, layout(81, 4));
            assert_eq!(a.listed(), 1, "an 88-byte block listed");
            let other = a.alloc(layout(96, 8));
            assert_ne!(other, x, "another size does not take it");
            let aligned = a.alloc(layout(88, 16));
            assert_ne!(aligned, x, "an alignment over 8 is not served from a list");
            assert_eq!(aligned as usize % 16, 0);
            let again = a.alloc(layout(82, 1));
            assert_eq!(again, x, "82 bytes round to 88: the listed block");
            assert_eq!(a.listed(), 0);
            std::ptr::write_bytes(again, 0x5A, 82);
            let small = a.alloc(layout(MIN_LISTED - GRAIN, 8));
            let big = a.alloc(layout(MAX_LISTED + 8, 8));
            let after = a.alloc(layout(8, 8));
            a.dealloc(small, layout(MIN_LISTED - GRAIN, 8));
            a.dealloc(big, layout(MAX_LISTED + 8, 8));
            assert_eq!(
                a.listed(),
                0,
                "blocks under MIN_LISTED or over MAX_LISTED are kept, not listed"
            );
            for (p, size) in [
                (keep, 8),
                (other, 96),
                (aligned, 88),
                (again, 82),
                (after, 8),
            ] {
                a.dealloc(p, layout(size, 8));
            }
        }
    }

    #[test]
    fn a_held_state_never_makes_a_call_wait() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; each pointer freed once with its layout.
        unsafe {
            let x = a.alloc(layout(16, 8));
            let y = a.alloc(layout(16, 8));
            let held = a.lock().expect("free");
            let z = a.alloc(layout(16, 8));
            assert!(a.offset(z).is_none(), "held: from the system allocator");
            a.dealloc(x, layout(16, 8));
            let grown = a.realloc(y, layout(16, 8), 32);
            assert!(
                a.offset(grown).is_none(),
                "held: moved to the system allocator"
            );
            drop(held);
            assert_eq!(a.listed(), 0, "x and y were kept, not listed");
            assert_eq!(a.used(), 32, "nor taken back");
            a.dealloc(z, layout(16, 8));
            a.dealloc(grown, layout(32, 8));
        }
    }

    /// What the arena should do, kept by plain bookkeeping: the top and the free lists by
    /// rounded size; each operation's expected offset (`None`: the system allocator).
    #[derive(Default)]
    struct Model {
        top: usize,
        lists: std::collections::HashMap<usize, Vec<usize>>,
    }

    impl Model {
        fn alloc(&mut self, size: usize, align: usize) -> Option<usize> {
            let r = size.next_multiple_of(GRAIN);
            if align <= GRAIN && (MIN_LISTED..=MAX_LISTED).contains(&r) {
                if let Some(at) = self.lists.get_mut(&r).and_then(Vec::pop) {
                    return Some(at);
                }
            }
            let start = self.top.next_multiple_of(align.max(GRAIN));
            (start + r <= SIZE).then(|| {
                self.top = start + r;
                start
            })
        }

        fn free(&mut self, at: usize, size: usize) {
            let r = size.next_multiple_of(GRAIN);
            if at + r == self.top {
                self.top = at;
            } else if (MIN_LISTED..=MAX_LISTED).contains(&r) {
                self.lists.entry(r).or_default().push(at);
            }
        }

        /// `Some(at)`: resized in place.
        fn resize(&mut self, at: usize, old: usize, new: usize) -> bool {
            let (ro, rn) = (old.next_multiple_of(GRAIN), new.next_multiple_of(GRAIN));
            if rn <= ro {
                if at + ro == self.top {
                    self.top = at + rn;
                }
                true
            } else if at + ro == self.top && at + rn <= SIZE {
                self.top = at + rn;
                true
            } else {
                false
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(usize, usize),
        Free(usize),
        Realloc(usize, usize),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        let size = prop_oneof![6 => 1..80usize, 3 => 1..6000usize, 1 => 1..400_000usize];
        let align = prop_oneof![
            1usize..=1,
            8usize..=8,
            4usize..=4,
            16usize..=16,
            64usize..=64
        ];
        prop_oneof![
            4 => (size.clone(), align).prop_map(|(s, a)| Op::Alloc(s, a)),
            3 => any::<usize>().prop_map(Op::Free),
            2 => (any::<usize>(), size).prop_map(|(i, s)| Op::Realloc(i, s)),
        ]
    }

    /// Marks a block's first and last bytes (all of a short one) with its tag.
    fn mark(p: *mut u8, size: usize, tag: u8) {
        for i in (0..size.min(16)).chain(size.saturating_sub(16)..size) {
            // SAFETY: `i < size`, the block's length.
            unsafe { p.add(i).write(tag) };
        }
    }

    fn marked(p: *mut u8, size: usize, tag: u8) -> bool {
        // SAFETY: `i < size`, the block's length.
        (0..size.min(16))
            .chain(size.saturating_sub(16)..size)
            .all(|i| unsafe { p.add(i).read() } == tag)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Any sequence of allocations, frees and resizes: every block comes where the model
        /// says (a list, the top or the system allocator), is aligned, keeps its bytes, and no
        /// two live blocks overlap.
        #[test]
        fn the_arena_does_what_the_model_says(ops in proptest::collection::vec(op(), 1..120)) {
            let a = Arena::leaked();
            let mut model = Model::default();
            // Live blocks: pointer, size, alignment, tag.
            let mut live: Vec<(*mut u8, usize, usize, u8)> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let tag = n as u8;
                match op {
                    Op::Alloc(size, align) => {
                        // SAFETY: a non-zero size.
                        let p = unsafe { a.alloc(layout(size, align)) };
                        proptest::prop_assert!(!p.is_null());
                        proptest::prop_assert_eq!(a.offset(p), model.alloc(size, align));
                        mark(p, size, tag);
                        live.push((p, size, align, tag));
                    }
                    Op::Free(i) if !live.is_empty() => {
                        let (p, size, align, _) = live.swap_remove(i % live.len());
                        if let Some(at) = a.offset(p) {
                            model.free(at, size);
                        }
                        // SAFETY: live, freed once, with its layout.
                        unsafe { a.dealloc(p, layout(size, align)) };
                    }
                    Op::Realloc(i, new) if !live.is_empty() => {
                        let i = i % live.len();
                        let (p, size, align, old_tag) = live[i];
                        let expect = match a.offset(p) {
                            Some(at) if model.resize(at, size, new) => Some(at),
                            at => {
                                let moved = model.alloc(new, align);
                                if let Some(at) = at {
                                    model.free(at, size);
                                }
                                moved
                            }
                        };
                        // SAFETY: live, with its layout; a non-zero new size.
                        let q = unsafe { a.realloc(p, layout(size, align), new) };
                        proptest::prop_assert!(!q.is_null());
                        proptest::prop_assert_eq!(a.offset(q), expect);
                        let kept = size.min(new);
                        // SAFETY: `kept` bytes of the block are the old block's.
                        let first = unsafe { std::slice::from_raw_parts(q, kept.min(16)) };
                        proptest::prop_assert!(first.iter().all(|b| *b == old_tag), "bytes kept");
                        mark(q, new, tag);
                        live[i] = (q, new, align, tag);
                    }
                    _ => {}
                }
                proptest::prop_assert_eq!(a.used(), model.top);
                let mut ranges: Vec<(usize, usize)> = Vec::new();
                for (p, size, align, tag) in &live {
                    proptest::prop_assert_eq!(*p as usize % align, 0, "aligned");
                    proptest::prop_assert!(marked(*p, *size, *tag), "no block overwrote another");
                    ranges.push((*p as usize, *p as usize + size));
                }
                ranges.sort();
                proptest::prop_assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "disjoint");
            }
            for (p, size, align, _) in live {
                // SAFETY: live, freed once, with its layout.
                unsafe { a.dealloc(p, layout(size, align)) };
            }
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_in_place_or_moved() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; pointers used with the layouts they were given with.
        unsafe {
            let p = a.alloc(layout(16, 8));
            std::ptr::write_bytes(p, 0xAB, 16);
            let q = a.realloc(p, layout(16, 8), 4000);
            assert_eq!(q, p, "the last block grows in place");
            let r = a.alloc(layout(8, 8));
            let s = a.realloc(q, layout(4000, 8), 9000);
            assert_ne!(s, q, "not the last block any more: moved");
            let moved = std::slice::from_raw_parts(s, 16);
            assert!(moved.iter().all(|b| *b == 0xAB), "the bytes came along");
            let t = a.realloc(s, layout(9000, 8), 10);
            assert_eq!(t, s, "shrinks in place");
            assert!(!r.is_null());
        }
    }

    #[test]
    fn what_does_not_fit_goes_to_the_system_allocator() {
        let a = Arena::leaked();
        // SAFETY: non-zero sizes; each pointer freed once with its layout.
        unsafe {
            let big = a.alloc(layout(SIZE + 1, 8));
            assert!(!big.is_null());
            assert!(a.offset(big).is_none(), "from the system allocator");
            assert_eq!(a.used(), 0);
            std::ptr::write_bytes(big, 1, SIZE + 1);
            a.dealloc(big, layout(SIZE + 1, 8));
            // Fill the region, then one more block spills over.
            let most = a.alloc(layout(SIZE - 8, 8));
            assert!(a.offset(most).is_some());
            let spill = a.alloc(layout(64, 8));
            assert!(a.offset(spill).is_none(), "the region is full: system");
            // A region block that must grow past the end moves to the system allocator.
            let grown = a.realloc(most, layout(SIZE - 8, 8), SIZE + 8);
            assert!(a.offset(grown).is_none());
            assert_eq!(
                a.used(),
                0,
                "the region's last block was given back when it moved"
            );
            a.dealloc(spill, layout(64, 8));
            a.dealloc(grown, layout(SIZE + 8, 8));
        }
    }

    #[test]
    fn a_foreign_pointer_never_moves_the_top() {
        let a = Arena::leaked();
        let b = Arena::leaked();
        // SAFETY: non-zero sizes; `x` is freed to the arena that gave it out.
        unsafe {
            let x = a.alloc(layout(32, 8));
            let y = b.alloc(layout(32, 8));
            assert!(a.offset(y).is_none());
            assert_eq!(a.used(), 32);
            b.dealloc(y, layout(32, 8));
            assert_eq!(a.used(), 32, "b's free did not touch a");
            a.dealloc(x, layout(32, 8));
            assert_eq!(a.used(), 0);
        }
    }

    #[test]
    fn threads_never_share_a_block() {
        let a: &'static Arena = Box::leak(Box::new(Arena::leaked()));
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut mine = Vec::new();
                    for _ in 0..500 {
                        // SAFETY: a non-zero size.
                        let p = unsafe { a.alloc(layout(24, 8)) };
                        // SAFETY: 24 bytes long.
                        unsafe { std::ptr::write_bytes(p, t, 24) };
                        mine.push(p as usize);
                    }
                    for p in &mine {
                        // SAFETY: still live (never freed) and 24 bytes long.
                        let bytes = unsafe { std::slice::from_raw_parts(*p as *const u8, 24) };
                        assert!(bytes.iter().all(|b| *b == t));
                    }
                    mine
                })
            })
            .collect();
        let mut all: Vec<usize> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 2000, "every block distinct");
    }
}
