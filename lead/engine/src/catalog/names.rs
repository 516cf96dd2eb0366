//! The catalog's name → index table: open addressing over `u32` indices into the tool
//! list, so no name is copied (a `HashMap<String, _>` would allocate once per tool).
//! Keys are hashed with foldhash under a random per-process seed: several times faster
//! than SipHash on short names, and names cannot be chosen to collide without the seed
//! (which is never exposed). At most half the slots are used.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;

const EMPTY: u32 = u32::MAX;

pub(crate) struct NameTable {
    slots: Vec<u32>,
    hasher: RandomState,
}

impl NameTable {
    pub(crate) fn with_capacity(names: usize) -> Self {
        let slots = (names.max(1) * 2).next_power_of_two();
        NameTable {
            slots: vec![EMPTY; slots],
            hasher: RandomState::default(),
        }
    }

    fn start(&self, name: &str) -> usize {
        // Truncating the hash is fine: only the low bits pick a slot.
        (self.hasher.hash_one(name) as usize) & (self.slots.len() - 1)
    }

    /// Inserts `index` under `name_of(index)`; on a duplicate name returns the index
    /// already there. Callers insert at most the capacity they asked for.
    pub(crate) fn insert<'a>(
        &mut self,
        index: u32,
        name_of: impl Fn(u32) -> &'a str,
    ) -> Result<(), u32> {
        let name = name_of(index);
        let mask = self.slots.len() - 1;
        let mut slot = self.start(name);
        loop {
            match self.slots[slot] {
                EMPTY => {
                    self.slots[slot] = index;
                    return Ok(());
                }
                other if name_of(other) == name => return Err(other),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    pub(crate) fn get<'a>(&self, name: &str, name_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut slot = self.start(name);
        loop {
            match self.slots[slot] {
                EMPTY => return None,
                index if name_of(index) == name => return Some(index),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 4
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_name_and_reports_duplicates() {
        let names: Vec<String> = (0..1000).map(|i| format!("tool_{i}")).collect();
        let name_of = |i: u32| names[i as usize].as_str();
        let mut table = NameTable::with_capacity(names.len() + 1);
        for i in 0..1000 {
            assert_eq!(table.insert(i, name_of), Ok(()));
        }
        for (i, name) in names.iter().enumerate() {
            assert_eq!(table.get(name, name_of), Some(i as u32));
        }
        assert_eq!(table.get("tool_1000", name_of), None);
        let mut with_dup = names.clone();
        with_dup.push("tool_7".into());
        assert_eq!(
            table.insert(1000, |i| with_dup[i as usize].as_str()),
            Err(7)
        );
    }
}
