//! The module map: the loaded ELF objects the stacks run through, with
//! their load bias, segments and build id, so the analyzer can symbolize
//! offline.

use std::collections::{HashMap, HashSet};
use std::ffi::CStr;

use trace_format::Module;

use crate::fast_hash::BuildWordHasher;

/// The modules the process has had loaded at its snapshots and before its
/// `dlclose` calls, and those written so far to its trace file.
#[derive(Default)]
pub struct ModuleMap {
    /// Every module listed since the process (or the parent it was forked
    /// from) started, in the order seen: a stack captured before its
    /// library was unloaded may first be written after. A module listed
    /// again after another took its addresses is a new entry (see
    /// [`ModuleMap::refresh`]).
    seen: Vec<Module>,
    /// The latest entry of `seen` for each (name, load bias), the name as
    /// the loader gives it.
    latest: HashMap<(String, u64), usize, BuildWordHasher>,
    /// By entry of `seen`: its name as the loader gives it, which a
    /// relative one differs from (see [`ModuleMap::list`]).
    loader_names: Vec<String>,
    /// By entry of `seen`: a later entry took some of its addresses.
    replaced: Vec<bool>,
    /// The entries of `seen` this file holds.
    written: HashSet<usize, BuildWordHasher>,
    /// The load events counted when the modules were last listed.
    listed_at: Option<u64>,
    /// The objects loaded at the last listing, in the loader's order: each
    /// one's entry of `seen`, and how many stack nodes the process had
    /// made before it was loaded, as far as the listings tell.
    loaded: Vec<(usize, u32)>,
    /// The stack nodes made before the last listing began.
    nodes_at_listing: u32,
}

impl ModuleMap {
    /// Adds the modules loaded now to those seen; `nodes_made` is how many
    /// stack nodes the process has made, counted before this call. Listing
    /// them reads every module's program headers and notes, each a page
    /// fault in a freshly forked child (whose page tables do not map its
    /// parent's file pages yet): of a small forked child's 1 ms exit
    /// snapshot, 0.5 to 0.8 ms and 114 of its 140 faults. Without a load
    /// event since the last listing, nothing has changed.
    pub fn refresh(&mut self, nodes_made: u32) {
        let events = crate::unwind::module_set::load_events();
        if events.is_some() && events == self.listed_at {
            self.nodes_at_listing = nodes_made;
            return;
        }
        // Not listed (a dlclose under way in a child listing its mappings):
        // the next refresh lists them.
        if let Some(modules) = loaded_modules() {
            self.list(modules, nodes_made);
            self.listed_at = events;
        }
    }

    /// Takes `modules` as those loaded now. One the last listing lacked was
    /// loaded since it, after the nodes made before it.
    /// The loader keeps a name as `dlopen` was given it: a relative one
    /// (`dlopen("./libfeat.so")`) would name another file, or none, once the
    /// working directory changed or where the analyzer runs. A module
    /// first listed with one is recorded by the kernel's name of the file
    /// mapped at its first segment, absolute, all such read in one pass
    /// over /proc/self/maps, outside the loader's lock; where that cannot
    /// be read, or names no file (the vDSO's "linux-vdso.so.1" is
    /// "[vdso]"), by the loader's name.
    fn list(&mut self, modules: Vec<Module>, nodes_made: u32) {
        let before: HashMap<usize, u32, BuildWordHasher> = self.loaded.drain(..).collect();
        // The first segment of each module first listed with a relative name.
        let relative_new: Vec<(usize, u64)> = modules
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                !m.path.is_empty()
                    && !m.path.starts_with('/')
                    && !self.latest.contains_key(&(m.path.clone(), m.load_bias))
            })
            .filter_map(|(index, m)| Some((index, m.segments.first()?.0)))
            .collect();
        let at: Vec<u64> = relative_new.iter().map(|&(_, address)| address).collect();
        let mut files: Vec<Option<String>> = vec![None; modules.len()];
        for (&(index, _), file) in relative_new.iter().zip(crate::sys::files_mapped_at(&at)) {
            files[index] = file;
        }
        for (module, file) in modules.into_iter().zip(files) {
            let entry = self.see(module, file);
            let nodes_before = before.get(&entry).copied().unwrap_or(self.nodes_at_listing);
            self.loaded.push((entry, nodes_before));
        }
        self.nodes_at_listing = nodes_made;
    }

    /// Adds `module` as the latest entry unless it is already, for its
    /// addresses; returns its entry. A library loaded again where another
    /// was after that one took its addresses is an entry again, and its
    /// record goes out again with the next stack through it: the analyzer
    /// names what follows that record by it, not by the library in between.
    /// `file` is its absolute path, when the loader's name was relative and
    /// it was not seen before.
    fn see(&mut self, module: Module, file: Option<String>) -> usize {
        let key = (module.path.clone(), module.load_bias);
        if let Some(&entry) = self.latest.get(&key).filter(|&&entry| !self.replaced[entry]) {
            return entry;
        }
        for (earlier, replaced) in self.seen.iter().zip(&mut self.replaced) {
            *replaced |= overlap(earlier, &module);
        }
        // Loaded again where another was since: the path found before.
        let file = file.or_else(|| self.latest.get(&key).map(|&earlier| self.seen[earlier].path.clone()));
        let entry = self.seen.len();
        self.latest.insert(key, entry);
        let loader_name = module.path.clone();
        let module = match file {
            Some(path) => Module { path, ..module },
            None => module,
        };
        self.seen.push(module);
        self.loader_names.push(loader_name);
        self.replaced.push(false);
        entry
    }

    /// What a `dlclose` of the object loaded at `load_bias` as `name` may
    /// unload, as the last listing has it: it and the objects listed after
    /// it (loaded since, its own dependencies among them). Returns their
    /// segments, and the stack nodes made before the first of them was
    /// loaded or last closed, none of which the caller need look at: it
    /// writes those made since, up to `nodes_made`, that run through them,
    /// so that a later close looks only at nodes made after those.
    /// Nothing for the main program, or an object not listed.
    pub fn closing(&mut self, load_bias: u64, name: &str, nodes_made: u32) -> (Vec<(u64, u64)>, u32) {
        let (seen, names) = (&self.seen, &self.loader_names);
        let first =
            self.loaded.iter().position(|&(entry, _)| seen[entry].load_bias == load_bias && names[entry] == name);
        let Some(first) = first.filter(|&first| first > 0) else { return (Vec::new(), 0) };
        let unloadable = &mut self.loaded[first..];
        let segments = unloadable.iter().flat_map(|&(entry, _)| seen[entry].segments.iter().copied()).collect();
        let nodes_before = unloadable.iter().map(|&(_, nodes)| nodes).min().unwrap_or(0);
        unloadable.iter_mut().for_each(|(_, nodes)| *nodes = nodes_made);
        (segments, nodes_before)
    }

    /// The modules seen (at the last [`ModuleMap::refresh`] or before)
    /// holding any of `return_addresses` that the file lacks, marked
    /// written. A file names the modules its stacks run through, not every
    /// library the process loaded: a DataLoader worker's trace listed over
    /// a hundred, two fifths of its size.
    pub fn holding(&mut self, return_addresses: &[u64]) -> Vec<Module> {
        if return_addresses.is_empty() {
            return Vec::new();
        }
        let mut ranges: Vec<(u64, u64, usize)> = self
            .seen
            .iter()
            .enumerate()
            .flat_map(|(index, module)| module.segments.iter().map(move |&(start, end)| (start, end, index)))
            .collect();
        ranges.sort_unstable();
        // A library unloaded may leave its addresses to one loaded later:
        // the one seen last holds them, as it did when the stacks captured
        // since the last snapshot ran through it (the analyzer, too, lets a
        // later record win). The furthest end of the ranges up to each one
        // bounds the look back, a step or two where nothing overlaps.
        let reach: Vec<u64> = ranges
            .iter()
            .scan(0, |furthest, r| {
                *furthest = r.1.max(*furthest);
                Some(*furthest)
            })
            .collect();
        let holder = |address: u64| {
            let below = ranges.partition_point(|r| r.0 <= address);
            (0..below)
                .rev()
                .take_while(|&i| reach[i] > address)
                .filter(|&i| address < ranges[i].1)
                .map(|i| ranges[i].2)
                .max()
        };
        let mut needed = vec![false; self.seen.len()];
        for &address in return_addresses {
            // The call instruction before a return address may end its module.
            if let Some(index) = holder(address).or_else(|| holder(address.checked_sub(1)?)) {
                needed[index] = true;
            }
        }
        let written = &mut self.written;
        self.seen
            .iter()
            .zip(needed)
            .enumerate()
            .filter(|&(index, (_, needed))| needed && written.insert(index))
            .map(|(_, (module, _))| module.clone())
            .collect()
    }

    /// A new trace file must list its modules again, and holds none of the
    /// stack nodes that earlier closes wrote.
    pub fn forget_written(&mut self) {
        self.written.clear();
        self.loaded.iter_mut().for_each(|(_, nodes_before)| *nodes_before = 0);
    }
}

/// Whether two modules share any address.
fn overlap(a: &Module, b: &Module) -> bool {
    a.segments.iter().any(|&(start, end)| b.segments.iter().any(|&(s, e)| s < end && start < e))
}

/// The address range `[start, end)` of the object containing `address`.
pub fn module_range_containing(address: u64) -> Option<(u64, u64)> {
    loaded_modules()?.into_iter().find_map(|module| {
        let start = module.segments.iter().map(|s| s.0).min()?;
        let end = module.segments.iter().map(|s| s.1).max()?;
        (start <= address && address < end).then_some((start, end))
    })
}

/// The loaded modules; `None` if they cannot be listed now (see
/// [`crate::loaded_objects::for_each`]).
fn loaded_modules() -> Option<Vec<Module>> {
    let mut modules: Vec<Module> = Vec::new();
    // SAFETY: the callback only reads the program headers it is passed, for
    // the duration of the call, and `data` is the `modules` vector above.
    let listed = unsafe { crate::loaded_objects::for_each(collect_module, (&mut modules as *mut Vec<Module>).cast()) };
    listed.then_some(modules)
}

unsafe extern "C" fn collect_module(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> i32 {
    // SAFETY: the listing passes a valid dl_phdr_info for the duration of
    // the callback, and `data` is the vector passed to it.
    let (info, modules) = unsafe { (&*info, &mut *data.cast::<Vec<Module>>()) };
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the listing guarantees `dlpi_phnum` headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
    };
    let bias = info.dlpi_addr;
    let segments: Vec<(u64, u64)> = phdrs
        .iter()
        .filter(|ph| ph.p_type == libc::PT_LOAD)
        .map(|ph| (bias.wrapping_add(ph.p_vaddr), bias.wrapping_add(ph.p_vaddr + ph.p_memsz)))
        .collect();
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by ld.so.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    let path = if name.is_empty() && modules.is_empty() {
        // The first object listed is the main program, which ld.so leaves unnamed.
        std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
    } else {
        name
    };
    let build_id = phdrs
        .iter()
        .filter(|ph| ph.p_type == libc::PT_NOTE)
        .find_map(|ph| {
            let start = bias.wrapping_add(ph.p_vaddr);
            let end = start.wrapping_add(ph.p_filesz);
            // Only read notes that lie inside a loaded segment, so they are mapped.
            let mapped = segments.iter().any(|&(s, e)| s <= start && end <= e);
            // SAFETY: the note segment lies inside a loaded segment of this
            // module, which stays mapped while the listing runs (see
            // `loaded_objects`).
            let notes = mapped.then(|| unsafe { std::slice::from_raw_parts(start as *const u8, ph.p_filesz as usize) });
            notes.and_then(gnu_build_id)
        })
        .unwrap_or_default();
    modules.push(Module { path, load_bias: bias, segments, build_id });
    0
}

/// Finds NT_GNU_BUILD_ID in a note segment.
fn gnu_build_id(mut notes: &[u8]) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word =
        |bytes: &[u8], at: usize| -> Option<u32> { Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?)) };
    let align4 = |n: usize| (n + 3) & !3;
    while notes.len() >= 12 {
        let name_size = word(notes, 0)? as usize;
        let desc_size = word(notes, 4)? as usize;
        let note_type = word(notes, 8)?;
        let desc_start = 12 + align4(name_size);
        let next = desc_start + align4(desc_size);
        if note_type == NT_GNU_BUILD_ID && notes.get(12..12 + name_size)? == b"GNU\0" {
            return notes.get(desc_start..desc_start + desc_size).map(<[u8]>::to_vec);
        }
        notes = notes.get(next..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str, segments: Vec<(u64, u64)>) -> Module {
        Module { path: path.into(), load_bias: segments[0].0, segments, build_id: vec![] }
    }

    fn paths(modules: Vec<Module>) -> Vec<String> {
        modules.into_iter().map(|m| m.path).collect()
    }

    #[test]
    fn the_test_binary_and_libc_are_listed_with_segments() {
        let modules = loaded_modules().unwrap();
        assert!(modules[0].path.contains("tracer"), "{:?}", modules[0].path);
        assert!(modules.iter().any(|m| m.path.contains("libc.so")));
        assert!(modules.iter().all(|m| m.segments.iter().all(|s| s.0 < s.1)));
        let libc = modules.iter().find(|m| m.path.contains("libc.so")).unwrap();
        assert_eq!(libc.build_id.len(), 20, "Debian's libc carries a SHA-1 build id");
    }

    #[test]
    fn a_file_gets_the_modules_its_addresses_lie_in_once() {
        let here = the_test_binary_and_libc_are_listed_with_segments as fn() as usize as u64;
        let in_libc = libc::malloc as *const () as usize as u64;
        let mut map = ModuleMap::default();
        map.refresh(0);
        let first = map.holding(&[here, in_libc, here + 1, 1]);
        assert_eq!(first.len(), 2, "{:?}", first.iter().map(|m| &m.path).collect::<Vec<_>>());
        assert!(first.iter().any(|m| m.path.contains("libc.so")));
        assert!(map.holding(&[here, in_libc]).is_empty(), "written once");
        map.forget_written();
        assert_eq!(map.holding(&[in_libc]).len(), 1, "again in a new file");
        assert!(map.holding(&[]).is_empty());
    }

    #[test]
    fn a_module_unloaded_since_a_snapshot_saw_it_is_still_found() {
        let mut map = ModuleMap::default();
        map.refresh(0);
        // Where no module is loaded now: the page at address 0.
        map.see(module("/opt/plugin.so", vec![(0x100, 0x900)]), None);
        assert_eq!(paths(map.holding(&[0x400])), ["/opt/plugin.so"]);
    }

    #[test]
    fn addresses_a_later_library_reuses_are_its_own() {
        let mut map = ModuleMap::default();
        // Seen in this order: the second reuses the first's addresses, and
        // a longer one before it reaches over both.
        for m in [
            module("/opt/wide.so", vec![(0x1000, 0x2000), (0x8000, 0x20000)]),
            module("/opt/first.so", vec![(0x10000, 0x14000)]),
            module("/opt/second.so", vec![(0x10000, 0x12000), (0x13000, 0x13800)]),
        ] {
            map.see(m, None);
        }
        assert_eq!(paths(map.holding(&[0x11000])), ["/opt/second.so"]);
        assert_eq!(paths(map.holding(&[0x12800])), ["/opt/first.so"], "between the second's segments");
        assert_eq!(paths(map.holding(&[0x18000, 0x1800])), ["/opt/wide.so"]);
        assert!(map.holding(&[0x13400, 0x5000]).is_empty(), "written already, and no module");
    }

    #[test]
    fn a_library_listed_again_after_another_took_its_addresses_is_written_again() {
        let mut map = ModuleMap::default();
        let (first, second) =
            (module("/opt/a.so", vec![(0x10000, 0x14000)]), module("/opt/b.so", vec![(0x10000, 0x12000)]));
        map.see(first.clone(), None);
        assert_eq!(paths(map.holding(&[0x11000])), ["/opt/a.so"]);
        map.see(first.clone(), None);
        assert!(map.holding(&[0x11000]).is_empty(), "listed again with nothing in between: the same entry");
        map.see(second, None);
        assert_eq!(paths(map.holding(&[0x11000])), ["/opt/b.so"]);
        map.see(first.clone(), None);
        assert_eq!(paths(map.holding(&[0x11000])), ["/opt/a.so"], "back at its place, written again");
        map.see(module("/opt/c.so", vec![(0x20000, 0x21000)]), None);
        map.see(first, None);
        assert!(map.holding(&[0x13000]).is_empty(), "a library elsewhere replaces nothing");
    }

    #[test]
    fn modules_are_listed_again_only_after_a_load_event() {
        let mut map = ModuleMap::default();
        map.refresh(0);
        assert!(!map.seen.is_empty());
        map = ModuleMap { listed_at: map.listed_at, ..ModuleMap::default() };
        map.refresh(0);
        assert!(map.seen.is_empty(), "no load event: not listed again");
        crate::unwind::module_set::objects_changing();
        map.refresh(0);
        assert!(!map.seen.is_empty(), "listed again after the event");
    }

    #[test]
    fn a_close_may_unload_the_object_and_those_listed_after_it() {
        let (program, libc) =
            (module("/opt/program", vec![(0x1000, 0x2000)]), module("/lib/libc.so.6", vec![(0x9000, 0xa000)]));
        let plugin = module("/opt/plugin.so", vec![(0x5000, 0x6000)]);
        let helper = module("/opt/helper.so", vec![(0x7000, 0x8000)]);
        let mut map = ModuleMap::default();
        map.list(vec![program.clone(), libc.clone(), plugin.clone()], 10);
        map.list(vec![program.clone(), libc.clone(), plugin.clone(), helper.clone()], 25);
        assert_eq!(map.closing(0x7000, "/opt/helper.so", 30), (vec![(0x7000, 0x8000)], 10), "loaded after 10 nodes");
        let both = vec![(0x5000, 0x6000), (0x7000, 0x8000)];
        assert_eq!(map.closing(0x5000, "/opt/plugin.so", 35), (both.clone(), 0), "the helper loaded after it");
        assert_eq!(map.closing(0x5000, "/opt/plugin.so", 40), (both, 35), "written up to the last close");
        map.list(vec![program.clone(), libc.clone(), helper.clone()], 45);
        map.list(vec![program.clone(), libc.clone(), helper, plugin], 55);
        assert_eq!(map.closing(0x5000, "/opt/plugin.so", 60), (vec![(0x5000, 0x6000)], 45), "loaded again");
        assert_eq!(map.closing(0x1000, "/opt/program", 60), (vec![], 0), "the main program stays");
        assert_eq!(map.closing(0x5000, "/opt/elsewhere.so", 60), (vec![], 0));
        map.forget_written();
        assert_eq!(map.closing(0x5000, "/opt/plugin.so", 70), (vec![(0x5000, 0x6000)], 0), "a new file");
    }

    #[test]
    fn a_relative_name_becomes_the_path_of_the_file_mapped_there() {
        let here = the_test_binary_and_libc_are_listed_with_segments as fn() as usize as u64;
        let binary = std::fs::read_link("/proc/self/exe").unwrap().to_string_lossy().into_owned();
        // SAFETY: getauxval only reads the auxiliary vector.
        let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        let mut map = ModuleMap::default();
        let modules = vec![
            module("./tracer-tests", vec![(here, here + 1)]),
            module("/opt/as-given.so", vec![(0x3000, 0x4000)]),
            module("linux-vdso.so.1", vec![(vdso, vdso + 1)]),
            module("./unmapped.so", vec![(0x1000, 0x2000)]),
        ];
        map.list(modules.clone(), 0);
        let seen: Vec<&str> = map.seen.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(seen, [binary.as_str(), "/opt/as-given.so", "linux-vdso.so.1", "./unmapped.so"]);
        // A close names the object as the loader does.
        map.list(modules, 0);
        assert_eq!(map.seen.len(), 4, "listed again: the same entries");
        assert_eq!(map.closing(vdso, "linux-vdso.so.1", 5), (vec![(vdso, vdso + 1), (0x1000, 0x2000)], 0));
        // Loaded again where another library was since: the path found before.
        map.see(module("/opt/other.so", vec![(here, here + 1)]), None);
        map.see(module("./tracer-tests", vec![(here, here + 1)]), None);
        assert_eq!(map.seen.last().unwrap().path, binary);
    }

    #[test]
    fn own_code_lies_in_a_listed_module() {
        let here = the_test_binary_and_libc_are_listed_with_segments as fn() as usize as u64;
        let (start, end) = module_range_containing(here).unwrap();
        assert!(start <= here && here < end);
    }
}
