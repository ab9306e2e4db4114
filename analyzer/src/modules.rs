//! The module records of a trace, and which of them name a stack node's
//! addresses.
//!
//! The tracer writes a module's record before the first stack node whose
//! addresses lie in it. A library unloaded may leave its addresses to one
//! loaded later, whose record then overlaps the earlier one's: the nodes
//! written from that record on ran through the later library, those
//! written before it through the earlier one. Each such record starts a
//! *generation*, and a node's addresses are looked up among the records of
//! its generation and those before it, a later record winning where two
//! overlap. A record that overlaps none before it (nearly all of them)
//! only adds addresses, so it joins the current generation: a trace has a
//! generation more for each library that took another's addresses, not
//! for each record.

use trace_format::Module;

/// The module generation a stack node was written in, counted from 0.
pub type Generation = u32;

/// A trace's module records in file order, cut into generations.
#[derive(Debug, Default)]
pub struct ModuleRecords {
    pub records: Vec<Module>,
    /// The index of the first record of each generation after the first.
    generation_starts: Vec<usize>,
}

impl ModuleRecords {
    /// Adds the next record of the file, starting a generation when it
    /// takes addresses an earlier record of another library (or of the same
    /// library loaded elsewhere) held.
    pub fn push(&mut self, module: Module) {
        let other_library = |earlier: &&Module| earlier.path != module.path || earlier.load_bias != module.load_bias;
        let overlaps = |earlier: &Module| {
            earlier.segments.iter().any(|&(start, end)| module.segments.iter().any(|&(s, e)| s < end && start < e))
        };
        if self.records.iter().filter(other_library).any(overlaps) {
            self.generation_starts.push(self.records.len());
        }
        self.records.push(module);
    }

    /// The generation of the records pushed so far: that of a stack node read now.
    pub fn current_generation(&self) -> Generation {
        Generation::try_from(self.generation_starts.len()).unwrap_or(Generation::MAX)
    }

    /// How many records, from the first, are in force for a node of `generation`.
    pub fn in_force(&self, generation: Generation) -> usize {
        self.generation_starts.get(generation as usize).copied().unwrap_or(self.records.len())
    }
}

/// The runtime address ranges of the module records.
#[derive(Debug, Default)]
pub struct ModuleMap {
    /// Every record's `[start, end)` segments with its index, by start.
    ranges: Vec<(u64, u64, usize)>,
    /// The furthest end among the ranges up to each one: it bounds the look
    /// back from an address, a step or two where nothing overlaps.
    reach: Vec<u64>,
    /// The lowest segment start of each record.
    starts: Vec<u64>,
}

impl ModuleMap {
    pub fn new(modules: &[Module]) -> Self {
        let mut ranges: Vec<(u64, u64, usize)> = modules
            .iter()
            .enumerate()
            .flat_map(|(index, module)| module.segments.iter().map(move |&(start, end)| (start, end, index)))
            .filter(|&(start, end, _)| start < end)
            .collect();
        ranges.sort_unstable();
        let reach = ranges
            .iter()
            .scan(0, |furthest, range| {
                *furthest = range.1.max(*furthest);
                Some(*furthest)
            })
            .collect();
        let starts = modules.iter().map(|m| m.segments.iter().map(|s| s.0).min().unwrap_or(0)).collect();
        ModuleMap { ranges, reach, starts }
    }

    /// The record holding `address` among the first `in_force`, the
    /// latest where several do.
    pub fn find(&self, address: u64, in_force: usize) -> Option<usize> {
        let below = self.ranges.partition_point(|r| r.0 <= address);
        (0..below)
            .rev()
            .take_while(|&i| self.reach[i] > address)
            .map(|i| self.ranges[i])
            .filter(|&(_, end, index)| address < end && index < in_force)
            .map(|(_, _, index)| index)
            .max()
    }

    /// The record of a return address among the first `in_force`, and the
    /// address to look up in its file: `ip - 1` (inside the call
    /// instruction) unless that would fall before the module's start,
    /// minus the load bias.
    pub fn locate(&self, modules: &[Module], ip: u64, in_force: usize) -> Option<(usize, u64)> {
        let index = self.find(ip, in_force).or_else(|| self.find(ip.checked_sub(1)?, in_force))?;
        let probe = if ip > self.starts[index] { ip - 1 } else { ip };
        Some((index, probe.wrapping_sub(modules[index].load_bias)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str, segments: Vec<(u64, u64)>) -> Module {
        Module { path: path.into(), load_bias: segments[0].0, segments, build_id: vec![] }
    }

    #[test]
    fn later_modules_win_overlaps() {
        let modules = vec![module("a", vec![(100, 200)]), module("b", vec![(150, 160)])];
        let map = ModuleMap::new(&modules);
        let all = modules.len();
        assert_eq!(map.find(99, all), None);
        assert_eq!(map.find(100, all), Some(0));
        assert_eq!(map.find(149, all), Some(0));
        assert_eq!(map.find(150, all), Some(1));
        assert_eq!(map.find(159, all), Some(1));
        assert_eq!(map.find(160, all), Some(0));
        assert_eq!(map.find(199, all), Some(0));
        assert_eq!(map.find(200, all), None);
        assert_eq!(map.find(150, 1), Some(0), "before the second record, the first holds it");
    }

    #[test]
    fn return_addresses_look_up_the_call() {
        let modules = vec![module("a", vec![(0x1000, 0x2000)])];
        let map = ModuleMap::new(&modules);
        assert_eq!(map.locate(&modules, 0x1010, 1), Some((0, 0xf)));
        assert_eq!(map.locate(&modules, 0x1000, 1), Some((0, 0)));
        assert_eq!(map.locate(&modules, 0x2000, 1), Some((0, 0xfff)));
        assert_eq!(map.locate(&modules, 0x3000, 1), None);
        assert_eq!(map.locate(&modules, 0x1010, 0), None, "no record in force");
    }

    #[test]
    fn a_wide_range_before_others_does_not_hide_them() {
        let modules = vec![
            module("wide", vec![(0x1000, 0x9000)]),
            module("inside", vec![(0x2000, 0x3000)]),
            module("after", vec![(0x4000, 0x5000)]),
        ];
        let map = ModuleMap::new(&modules);
        assert_eq!(map.find(0x2800, 3), Some(1));
        assert_eq!(map.find(0x3800, 3), Some(0));
        assert_eq!(map.find(0x4800, 3), Some(2));
        assert_eq!(map.find(0x8fff, 3), Some(0));
    }

    #[test]
    fn a_library_taking_anothers_addresses_starts_a_generation() {
        let mut records = ModuleRecords::default();
        records.push(module("/usr/lib/libc.so.6", vec![(0x7000, 0x8000)]));
        records.push(module("/opt/a.so", vec![(0x1000, 0x2000), (0x3000, 0x4000)]));
        assert_eq!(records.current_generation(), 0);
        records.push(module("/opt/next_to_a.so", vec![(0x4000, 0x5000)]));
        assert_eq!(records.current_generation(), 0, "adjacent, not overlapping");
        records.push(module("/opt/b.so", vec![(0x3800, 0x3900)]));
        assert_eq!(records.current_generation(), 1);
        records.push(module("/opt/c.so", vec![(0x9000, 0xa000)]));
        records.push(module("/opt/d.so", vec![(0x1000, 0x1800)]));
        assert_eq!(records.current_generation(), 2);
        assert_eq!((records.in_force(0), records.in_force(1), records.in_force(2)), (3, 5, 6));
        assert_eq!(records.in_force(7), 6, "a generation past the last sees every record");
    }

    #[test]
    fn the_same_library_listed_again_starts_no_generation() {
        let mut records = ModuleRecords::default();
        records.push(module("/opt/a.so", vec![(0x1000, 0x2000)]));
        records.push(module("/opt/a.so", vec![(0x1000, 0x2000)]));
        assert_eq!(records.current_generation(), 0);
        records.push(module("/opt/a.so", vec![(0x1800, 0x2800)]));
        assert_eq!(records.current_generation(), 1, "loaded again elsewhere, over its old place");
    }
}
