//! The lists of wants the streams asked lately, found again for the streams that ask alike
//! ([`Lists`]), and each stream's set of the names it holds of a type ([`NameSet`]), shared by
//! the streams that took the same lists in turn.

use std::borrow::Cow;
use std::sync::{Arc, Weak};

use xdsd_core::hash::HashSet as FastSet;

use crate::group::GroupKey;
use crate::table::{Name, TypeKey, Want};

/// A stream's names of a type, with a mark of what it holds: every change of a set gives it a
/// new mark ([`NameSet::edit`]), so that two sets with one mark hold the same names (the empty
/// sets all have mark 0). [`Lists`] keeps, by the mark of a set and a list, the set another
/// stream made of the two ([`Union`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct NameSet {
    pub(super) mark: u64,
    names: FastSet<Name>,
}

impl std::ops::Deref for NameSet {
    type Target = FastSet<Name>;

    fn deref(&self) -> &FastSet<Name> {
        &self.names
    }
}

impl FromIterator<Name> for NameSet {
    fn from_iter<I: IntoIterator<Item = Name>>(names: I) -> Self {
        NameSet {
            mark: next_mark(),
            names: names.into_iter().collect(),
        }
    }
}

impl NameSet {
    /// The names of `set` to change: its own (copied if other streams hold it too), with a
    /// new mark.
    pub(super) fn edit(set: &mut Arc<NameSet>) -> &mut FastSet<Name> {
        let own = Arc::make_mut(set);
        own.mark = next_mark();
        &mut own.names
    }
}

/// A mark no set had.
fn next_mark() -> u64 {
    static MARKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    MARKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// How many of the latest lists [`Lists`] finds again.
const LISTS_KEPT: usize = 64;

/// The latest lists of wants the streams asked, so that streams that ask alike (a fleet's,
/// request for request) hand the table one list
/// ([`Demanded::AcquireList`](super::Demanded::AcquireList)): the table holds a list once for
/// them all. Kept weakly: a list lives while the table holds it. A request is
/// found by its names as it encodes them, when the list was made from a request that named its
/// names and no more: one comparison of bytes (name by name, 9 streams of 40,000 names cost 84 M
/// instructions); else name by name, only against the lists that start with its first name.
///
/// With a list, the set of its names that the stream which made it holds, while that stream
/// holds them and no more (weakly too: a stream that changes its names makes the set its own,
/// [`Arc::make_mut`], and the list is left without one): a stream whose first request names a
/// list's names takes both ([`Lists::find`]), and makes neither a want nor a set entry per name.
#[derive(Debug, Default)]
pub(crate) struct Lists {
    recent: std::collections::VecDeque<Kept>,
}

/// A list [`Lists`] keeps, and the set of its names a stream holds (see there).
#[derive(Debug)]
struct Kept {
    list: Weak<[Want]>,
    set: Weak<NameSet>,
    /// The sets streams made of theirs with the list's names, latest last (at most
    /// [`UNIONS_KEPT`]).
    unions: Vec<Union>,
    /// The names of a request that named the list's names and no more, as it encoded them.
    sent: Option<Box<[u8]>>,
}

/// The set a stream made of the names it held (mark `before`) and a list's (none of which it
/// held), while a stream holds it unchanged (mark `after`).
#[derive(Debug)]
struct Union {
    before: u64,
    after: u64,
    set: Weak<NameSet>,
}

/// How many of the sets made with one list [`Lists`] keeps.
const UNIONS_KEPT: usize = 8;

/// A list of wants and the set of their names (if a stream holds it), as [`Lists::find`]
/// finds them.
pub(super) type Listed = (Arc<[Want]>, Option<Arc<NameSet>>);

impl Lists {
    /// The list of `wants`: one asked alike lately, else `wants` made one. `names`: the set of
    /// the wants' names the asking stream holds, when it holds those and no more.
    /// `sent`: the names of the request that asked `wants` as it encoded them, when it named
    /// those names and no more.
    pub(crate) fn intern(
        &mut self,
        wants: Vec<Want>,
        names: Option<&Arc<NameSet>>,
        sent: Option<&[u8]>,
    ) -> Arc<[Want]> {
        let found = self.recent.iter_mut().find_map(|kept| {
            let list = kept.list.upgrade()?;
            let alike = list.len() == wants.len()
                && list.first() == wants.first()
                && list.last() == wants.last()
                && list[..] == wants[..];
            alike.then_some((list, kept))
        });
        if let Some((list, kept)) = found {
            if let (Some(names), 0) = (names, kept.set.strong_count()) {
                kept.set = Arc::downgrade(names);
            }
            if kept.sent.is_none() {
                kept.sent = sent.map(Box::from);
            }
            return list;
        }
        let list: Arc<[Want]> = wants.into();
        // A list gone keeps its room while a weak reference to it lives: let go of those.
        self.recent.retain(|kept| kept.list.strong_count() > 0);
        if self.recent.len() == LISTS_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(Kept {
            list: Arc::downgrade(&list),
            set: names.map(Arc::downgrade).unwrap_or_default(),
            unions: Vec::new(),
            sent: sent.map(Box::from),
        });
        list
    }

    /// The kept entry of `list`.
    fn kept_mut(&mut self, list: &Arc<[Want]>) -> Option<&mut Kept> {
        let at = Arc::as_ptr(list);
        self.recent
            .iter_mut()
            .rev()
            .find(|kept| std::ptr::addr_eq(kept.list.as_ptr(), at))
    }

    /// The set a stream made of names it held, marked `before`, and `list`'s, if a stream
    /// still holds it unchanged.
    pub(super) fn union(&mut self, list: &Arc<[Want]>, before: u64) -> Option<Arc<NameSet>> {
        let kept = self.kept_mut(list)?;
        kept.unions
            .iter()
            .rev()
            .filter(|u| u.before == before)
            .find_map(|u| u.set.upgrade().filter(|s| s.mark == u.after))
    }

    /// `set` is what a stream made of the names it held, marked `before`, and `list`'s: kept
    /// for the streams that take `list` holding the same ([`Lists::union`]).
    pub(super) fn add_union(&mut self, list: &Arc<[Want]>, before: u64, set: &Arc<NameSet>) {
        let Some(kept) = self.kept_mut(list) else {
            return;
        };
        kept.unions
            .retain(|u| u.set.upgrade().is_some_and(|s| s.mark == u.after));
        if kept.unions.len() >= UNIONS_KEPT {
            kept.unions.remove(0);
        }
        kept.unions.push(Union {
            before,
            after: set.mark,
            set: Arc::downgrade(set),
        });
    }

    /// The list of the wants of the names `names` gives (canonical, in order; read as far as
    /// they are a kept list's) of `type_key` in `group`, when a stream asked that list lately,
    /// and the set of those names if a stream holds it. Lists kept are of at least
    /// [`LIST_FROM`](super::LIST_FROM) wants: so is a request found here. Only a list that starts with the
    /// request's first name is read further (each reading of `names` may cost a pass over the
    /// request: its names checked as text), so that a request costs one reading for the lists
    /// it is not, whatever their number.
    pub(super) fn find<'a, I: Iterator<Item = Cow<'a, str>>>(
        &self,
        group: &GroupKey,
        type_key: &TypeKey,
        sent: &[u8],
        names: impl Fn() -> I,
    ) -> Option<Listed> {
        let of = |list: &Arc<[Want]>| {
            list.first()
                .is_some_and(|first| first.group == *group && first.type_url == *type_key)
        };
        let by_bytes = self.recent.iter().rev().find_map(|kept| {
            if kept.sent.as_deref() != Some(sent) {
                return None;
            }
            let list = kept.list.upgrade().filter(of)?;
            Some((list, kept.set.upgrade()))
        });
        if by_bytes.is_some() {
            return by_bytes;
        }
        let asked_first = names().next()?;
        self.recent.iter().rev().find_map(|Kept { list, set, .. }| {
            let list = list.upgrade().filter(of)?;
            let first = list.first()?;
            if *first.name != *asked_first {
                return None;
            }
            let mut asked = names();
            let alike = list.iter().all(|w| {
                asked.next().is_some_and(|n| {
                    *w.name == *n && w.group == first.group && w.type_url == first.type_url
                })
            }) && asked.next().is_none();
            alike.then(|| (list, set.upgrade()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wants(names: &[&str]) -> Vec<Want> {
        names
            .iter()
            .map(|n| Want::named(GroupKey::shared(), "t", *n))
            .collect()
    }

    #[test]
    fn streams_that_ask_alike_are_handed_one_list_and_the_others_their_own() {
        let mut lists = Lists::default();
        let first = lists.intern(wants(&["a", "b"]), None, None);
        let again = lists.intern(wants(&["a", "b"]), None, None);
        assert!(Arc::ptr_eq(&first, &again), "asked alike: one list");
        let other = lists.intern(wants(&["a", "c"]), None, None);
        assert!(!Arc::ptr_eq(&first, &other), "another list");
        let reordered = lists.intern(wants(&["b", "a"]), None, None);
        assert!(!Arc::ptr_eq(&first, &reordered), "another request");
        drop((first, again));
        let later = lists.intern(wants(&["a", "b"]), None, None);
        assert_eq!(
            &later[..],
            &wants(&["a", "b"])[..],
            "a list gone is made anew"
        );
    }

    #[test]
    fn only_the_latest_lists_are_found_again() {
        let mut lists = Lists::default();
        let kept: Vec<Arc<[Want]>> = (0..=LISTS_KEPT)
            .map(|i| lists.intern(wants(&[&format!("n{i}")]), None, None))
            .collect();
        assert!(Arc::ptr_eq(
            &kept[LISTS_KEPT],
            &lists.intern(wants(&[&format!("n{LISTS_KEPT}")]), None, None)
        ));
        assert!(
            !Arc::ptr_eq(&kept[0], &lists.intern(wants(&["n0"]), None, None)),
            "the oldest one is no longer looked for"
        );
    }

    fn names(list: &[Want]) -> Arc<NameSet> {
        Arc::new(list.iter().map(|w| w.name.clone()).collect())
    }

    /// [`Lists::find`] of `names` of `type_key` in `group`.
    fn find(lists: &Lists, group: &GroupKey, type_key: &TypeKey, names: &[&str]) -> Option<Listed> {
        lists.find(group, type_key, &[], || {
            names.iter().map(|n| Cow::Borrowed(*n))
        })
    }

    /// Names as a request encodes them (field 3 of a delta or SotW request, less the first key).
    fn sent(names: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                out.push(xdsd_core::session::names_key(3));
            }
            out.push(name.len() as u8);
            out.extend_from_slice(name.as_bytes());
        }
        out
    }

    /// Lists holding one list of `asked` (shared group, type `t`), made with the set of its
    /// names and, if given, the names as sent: the lists, the list and the set.
    fn listed(asked: &[&str], bytes: Option<&[u8]>) -> (Lists, Arc<[Want]>, Arc<NameSet>) {
        let mut lists = Lists::default();
        let made = wants(asked);
        let set = names(&made);
        let list = lists.intern(made, Some(&set), bytes);
        (lists, list, set)
    }

    #[test]
    fn a_request_whose_names_are_sent_as_a_lists_maker_sent_them_is_found_without_reading_them() {
        let (group, t) = (GroupKey::shared(), TypeKey::of("t"));
        let bytes = sent(&["a", "b", "c"]);
        let (lists, list, set) = listed(&["a", "b", "c"], Some(bytes.as_slice()));
        let unread =
            || -> std::iter::Empty<Cow<'static, str>> { panic!("the names were read one by one") };
        let (found, found_set) = lists.find(&group, &t, &bytes, unread).expect("found");
        assert!(Arc::ptr_eq(&list, &found));
        assert!(found_set.is_some_and(|found| Arc::ptr_eq(&set, &found)));
        // Other bytes: compared name by name (here: another list's names, not found).
        let other = sent(&["a", "b", "d"]);
        let by_name = || ["a", "b", "d"].into_iter().map(Cow::Borrowed);
        assert!(lists.find(&group, &t, &other, by_name).is_none());
        // The same bytes in another group or type: not this list.
        let other_group = group.with_params([("k".to_owned(), "v".to_owned())].into());
        let none = || std::iter::empty::<Cow<'static, str>>();
        assert!(lists.find(&other_group, &t, &bytes, none).is_none());
        assert!(lists
            .find(&group, &TypeKey::of("u"), &bytes, none)
            .is_none());
        // A list made from a request that named more than it (a name held already, `*`) has
        // no bytes: found name by name only.
        let mut lists = Lists::default();
        let list = lists.intern(wants(&["a", "b"]), None, None);
        let by_name = || ["a", "b"].into_iter().map(Cow::Borrowed);
        let found = lists
            .find(&group, &t, &sent(&["a", "b"]), by_name)
            .expect("by name");
        assert!(Arc::ptr_eq(&list, &found.0));
    }

    #[test]
    fn a_stream_that_asks_a_listed_list_first_takes_the_list_and_the_set_of_its_names() {
        let (group, t) = (GroupKey::shared(), TypeKey::of("t"));
        let (lists, list, set) = listed(&["a", "b", "c"], None);
        let (found, found_set) = find(&lists, &group, &t, &["a", "b", "c"]).expect("asked alike");
        assert!(Arc::ptr_eq(&list, &found));
        assert!(found_set.is_some_and(|found| Arc::ptr_eq(&set, &found)));
        for other in [
            &["a", "b"][..],
            &["a", "c", "b"],
            &["a", "b", "d"],
            &["a", "b", "c", "d"],
        ] {
            assert!(find(&lists, &group, &t, other).is_none(), "{other:?}");
        }
        assert!(
            find(&lists, &group, &TypeKey::of("u"), &["a", "b", "c"]).is_none(),
            "another type"
        );
        let other_group = group.with_params([("k".to_owned(), "v".to_owned())].into());
        assert!(
            find(&lists, &other_group, &t, &["a", "b", "c"]).is_none(),
            "another group"
        );
    }

    /// The set a stream made of what it held and a list is found by the mark of what it held
    /// and the list, while a stream holds it unchanged: not for another list, not for a set
    /// holding other names, not once changed or let go.
    #[test]
    fn a_stream_holding_what_another_held_takes_the_set_that_one_made_with_the_list() {
        let mut lists = Lists::default();
        let first = lists.intern(wants(&["a", "b"]), None, None);
        let next = lists.intern(wants(&["c", "d"]), None, None);
        let held = names(&first);
        assert!(lists.union(&next, held.mark).is_none(), "none made yet");
        // One stream takes `next` holding `first`'s names.
        let mut made = held.clone();
        NameSet::edit(&mut made).extend(next.iter().map(|w| w.name.clone()));
        lists.add_union(&next, held.mark, &made);
        let found = lists.union(&next, held.mark).expect("made");
        assert!(Arc::ptr_eq(&found, &made), "the one set");
        let mut all: Vec<&str> = found.iter().map(|n| &**n).collect();
        all.sort_unstable();
        assert_eq!(all, ["a", "b", "c", "d"]);
        assert!(lists.union(&first, held.mark).is_none(), "another list");
        let other = names(&first);
        assert!(lists.union(&next, other.mark).is_none(), "another set");
        assert!(lists.union(&next, 0).is_none(), "an empty set");
        // Changed by the stream holding it alone: no longer what was made.
        drop(found);
        NameSet::edit(&mut made).remove("a");
        assert!(lists.union(&next, held.mark).is_none(), "changed");
        // Made again, then let go.
        let mut again = held.clone();
        NameSet::edit(&mut again).extend(next.iter().map(|w| w.name.clone()));
        lists.add_union(&next, held.mark, &again);
        assert!(lists.union(&next, held.mark).is_some());
        drop(again);
        assert!(lists.union(&next, held.mark).is_none(), "let go");
    }

    #[test]
    fn a_list_whose_set_was_changed_or_let_go_is_found_without_a_set_until_a_stream_holds_one() {
        let mut lists = Lists::default();
        let (group, t) = (GroupKey::shared(), TypeKey::of("t"));
        let made = wants(&["a", "b"]);
        let mut set = names(&made);
        let list = lists.intern(made.clone(), Some(&set), None);
        // The stream that made it unsubscribes a name: the set is its own from then on.
        NameSet::edit(&mut set).remove("a");
        let (found, none) = find(&lists, &group, &t, &["a", "b"]).expect("the list");
        assert!(Arc::ptr_eq(&list, &found) && none.is_none());
        // Another stream asks the list one by one, holding its names and no more: its set.
        let again = names(&made);
        assert!(Arc::ptr_eq(
            &list,
            &lists.intern(made.clone(), Some(&again), None)
        ));
        let (_, found) = find(&lists, &group, &t, &["a", "b"]).expect("held again");
        assert!(found.is_some_and(|found| Arc::ptr_eq(&again, &found)));
        drop(again);
        let (_, none) = find(&lists, &group, &t, &["a", "b"]).expect("the list");
        assert!(none.is_none(), "let go");
        // A list made by a request of a stream that held names already: kept without a set.
        let later = wants(&["c", "d"]);
        let kept = lists.intern(later, None, None);
        let (found, none) = find(&lists, &group, &t, &["c", "d"]).expect("kept");
        assert!(Arc::ptr_eq(&kept, &found) && none.is_none());
    }
}
