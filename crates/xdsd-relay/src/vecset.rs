//! A small ordered set kept as a sorted vector: what the table holds per narrowed want (the
//! streams a route holds, the groups routed by a name) has one member nearly always, and a
//! B-tree allocates a whole leaf node (about 100 bytes of `u64`s, with its bookkeeping) for its
//! first; a vector of one `u64` or `GroupKey` holds room for four (32 bytes). Lookups are binary
//! searches, so a set that does grow (a route shared by many streams) stays ordered and cheap
//! to search.

/// An ordered set of `T` in a sorted vector. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VecSet<T>(Vec<T>);

impl<T> Default for VecSet<T> {
    fn default() -> Self {
        VecSet(Vec::new())
    }
}

impl<T: Ord> VecSet<T> {
    /// The set of `x` alone.
    pub(crate) fn one(x: T) -> Self {
        VecSet(vec![x])
    }

    /// Adds `x`: whether it was not there.
    pub(crate) fn insert(&mut self, x: T) -> bool {
        match self.0.binary_search(&x) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, x);
                true
            }
        }
    }

    /// Takes `x` out: whether it was there.
    pub(crate) fn remove(&mut self, x: &T) -> bool {
        match self.0.binary_search(x) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// In order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }
}

impl<T> IntoIterator for VecSet<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    /// In order.
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_out_in_order_once_whatever_order_they_went_in() {
        let mut s = VecSet::one(5u64);
        assert!(s.insert(1));
        assert!(s.insert(9));
        assert!(!s.insert(5), "there already");
        assert_eq!(s.iter().copied().collect::<Vec<_>>(), [1, 5, 9]);
        assert_eq!(s.clone().into_iter().collect::<Vec<_>>(), [1, 5, 9]);
    }

    #[test]
    fn a_member_taken_out_is_gone_and_the_last_leaves_it_empty() {
        let mut s = VecSet::one(3u64);
        s.insert(4);
        assert!(s.remove(&3));
        assert!(!s.remove(&3), "taken out once");
        assert!(!s.is_empty());
        assert!(s.remove(&4));
        assert!(s.is_empty());
        assert!(VecSet::<u64>::default().is_empty());
    }

    #[test]
    fn one_member_holds_room_for_a_few_not_a_tree_node() {
        let s = VecSet::one(7u64);
        assert!(s.0.capacity() <= 4, "{}", s.0.capacity());
    }
}
