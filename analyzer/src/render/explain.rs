//! What a suspect's memory is, when its stack tells more than its frames
//! say by themselves: memory the interpreter or a library keeps for a
//! reason of its own, with what to do about it.
//!
//! Each explanation is recognised by a function on the stack, and is said
//! under the suspect (and in its JSON `explanation`); a leak verdict whose
//! top line's best suspect has one names what the memory is. The ranking
//! does not change.

use std::fmt;

use crate::analysis::Suspect;
use crate::merge::maps_a_pymalloc_arena;
use crate::symbolize::Frame;
use crate::trace::{pymalloc_untraced, Memory, Trace};
use trace_format::{
    PYMALLOC_OBJECTS_UNTRACED, PYTHON_ALLOCATOR_SETTING, PYTHON_FRAMES_OFF, PYTHON_FRAMES_UNSUPPORTED, PYTHON_SETTING,
};

/// A known reason for a suspect's memory to be kept.
#[derive(Debug, PartialEq, Eq)]
pub struct Explanation {
    /// What the memory is, as the verdict names it.
    pub what: &'static str,
    /// Why it stays, and what to do.
    pub detail: &'static str,
    /// The line the memory is charged to only happened to need more of it
    /// (a new arena, the next block of records): something else keeps it.
    pub incidental_site: bool,
    /// A cache or ring buffer the library keeps up to a bound of its own,
    /// which then stops growing: no leak, however it grows at first.
    pub levels_off: bool,
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.detail)
    }
}

/// The note for a Python process whose small objects came from pymalloc
/// untraced, with what the tracer said of tracing them (run with a setting,
/// or what that setting needs: frames read, which a process whose frames
/// were turned off has by running without that).
pub fn pymalloc_note(trace: &Trace) -> Option<String> {
    if !pymalloc_untraced(&trace.process) {
        return None;
    }
    let setting = trace.process.setting(PYTHON_ALLOCATOR_SETTING).unwrap_or_default();
    let advice = match python_frames(trace) {
        Some(Frames::TurnedOff { setting: frames, .. }) => {
            format!("tracing them (TRACER_PYTHON_OBJECTS=1) needs the frames read, which {frames} turned off")
        }
        _ => setting
            .strip_prefix(PYMALLOC_OBJECTS_UNTRACED)
            .map_or("run with TRACER_PYTHON_OBJECTS=1 to trace them", |rest| rest.trim_end_matches(')'))
            .to_string(),
    };
    Some(format!(
        "Python's pymalloc was in force: Python objects of 512 bytes or less are not traced one by one, only the arenas that hold them (as mapped memory), charged to whichever line needed a new one; {advice}"
    ))
}

/// Why a Python process's frames were not read, as its setting says.
enum Frames<'a> {
    /// An interpreter whose frames the tracer cannot read (older than 3.11).
    Unsupported { version: &'a str, why: &'a str },
    /// Turned off by `setting` (`TRACER_PYTHON_FRAMES=0`).
    TurnedOff { version: &'a str, setting: &'a str },
}

fn python_frames(trace: &Trace) -> Option<Frames<'_>> {
    let python = trace.process.setting(PYTHON_SETTING)?;
    if let Some((version, why)) = python.split_once(PYTHON_FRAMES_UNSUPPORTED) {
        return Some(Frames::Unsupported { version, why });
    }
    let (version, setting) = python.split_once(PYTHON_FRAMES_OFF)?;
    Some(Frames::TurnedOff { version, setting: setting.trim_start_matches('(').trim_end_matches(')') })
}

/// The note for a Python process whose frames were not read (an
/// interpreter older than 3.11, or frames turned off): its stacks hold the
/// interpreter's C functions where the Python lines would be.
pub fn python_frames_note(trace: &Trace) -> Option<String> {
    const STANDS_FOR: &str = "the stacks are native only, and a line named in the interpreter (obmalloc.c, ceval.c) stands for Python code they do not show";
    Some(match python_frames(trace)? {
        Frames::Unsupported { version, why } => format!(
            "Python {version}'s frames were not read ({why}): {STANDS_FOR}; run the job under Python 3.11 to 3.13 to see its Python lines"
        ),
        Frames::TurnedOff { version, setting } => format!(
            "Python {version}'s frames were turned off ({setting}): {STANDS_FOR}; run the job again without {setting} to see its Python lines"
        ),
    })
}

/// What a mapping suspect made by pymalloc's arena allocator is.
pub(crate) const PYMALLOC_ARENAS: Explanation = Explanation {
    what: "pymalloc arenas",
    detail: "this memory holds Python objects of 512 bytes or less; an arena is charged to the line whose object needed it, often a line that makes many short-lived objects, while objects that other lines keep fill it; run with TRACER_PYTHON_OBJECTS=1 to trace the objects themselves (sampled by bytes)",
    incidental_site: true,
    levels_off: false,
};

/// What a shared-memory suspect mapped as torch rebuilt a tensor another
/// process sent (a DataLoader worker's batch) is.
const WORKER_BATCHES: Explanation = Explanation {
    what: "batches from DataLoader workers",
    detail: "each arrives in shared memory that this process maps, and stays mapped as long as the batch or anything still holding it is kept (a list of batches, a loss or output kept with its autograd graph); keep numbers (.item()) or copies (.clone()) of what you need",
    incidental_site: false,
    levels_off: false,
};

/// torch's functions that map a tensor another process sent.
const SHARED_TENSOR_REBUILDERS: &[&str] = &["rebuild_storage_fd", "rebuild_storage_filename"];

/// What memory allocated inside the PyTorch profiler's operator callbacks is.
const PROFILER_RECORDS: Explanation = Explanation {
    what: "the PyTorch profiler's records",
    detail: "while a profiler runs it keeps a record of every operator, in blocks allocated by whichever operator fills the last one (so the line above is only where the records happened to grow); stop it (prof.stop(), or leave its `with` block) or give it a schedule that records a few steps",
    incidental_site: true,
    levels_off: false,
};

/// The functions of the profiler's operator callbacks (the C++ namespaces
/// of torch 2.x's profiler and of its older autograd profiler).
const PROFILER_NAMESPACES: &[&str] = &["torch::profiler::impl::", "torch::autograd::profiler::"];

/// What memory allocated while oneDNN created a primitive for its cache is.
const ONEDNN_PRIMITIVE_CACHE: Explanation = Explanation {
    what: "oneDNN's primitive cache",
    detail: "each new input shape (or data type, or memory layout) of a CPU convolution, matmul or reorder has its kernel compiled and cached, up to ONEDNN_PRIMITIVE_CACHE_CAPACITY primitives (1024 by default), and only then are the least recently used evicted; feed fixed or bucketed shapes, or set ONEDNN_PRIMITIVE_CACHE_CAPACITY lower (0 turns the cache off)",
    incidental_site: false,
    levels_off: true,
};

/// What memory allocated while ideep (PyTorch's layer over oneDNN) made a
/// primitive descriptor for its cache is.
const IDEEP_COMPUTATION_CACHE: Explanation = Explanation {
    what: "ideep's cache of primitive descriptors",
    detail: "each new input shape (or data type, or memory layout) of a CPU convolution or matmul has its oneDNN primitive descriptor made and kept in ideep's cache, up to 1024 per kind of operation, and only then are the least recently used evicted; feed fixed or bucketed shapes",
    incidental_site: false,
    levels_off: true,
};

/// What memory Intel MKL's memory manager handed one of its routines is.
const MKL_BUFFERS: Explanation = Explanation {
    what: "Intel MKL's buffer pool",
    detail: "MKL's routines (a CPU matrix multiply) take their work buffers from a memory manager of MKL's own, which keeps them for reuse, per thread and size, instead of freeing them; new matrix sizes (a new input shape or batch size) add buffers, and the pool stops growing once the sizes repeat; set MKL_DISABLE_FAST_MM=1 for MKL to free its buffers instead",
    incidental_site: false,
    levels_off: true,
};

/// MKL's memory manager's allocation functions.
const MKL_MEMORY_MANAGER: &[&str] = &["mkl_serv_allocate", "mkl_serv_malloc"];

/// What memory allocated as torch.distributed recorded a collective call is.
const FLIGHT_RECORDER: Explanation = Explanation {
    what: "torch.distributed's flight recorder",
    detail: "each collective call (an all-reduce of DistributedDataParallel's gradients) is recorded, with a captured traceback, in a ring buffer kept for debugging hangs; it grows until the buffer is full (TORCH_FR_BUFFER_SIZE entries, or TORCH_NCCL_TRACE_BUFFER_SIZE), then each new record replaces the oldest: memory that levels off, not a leak of the line above",
    incidental_site: false,
    levels_off: true,
};

/// What memory allocated while matplotlib made or drew a figure is.
const MATPLOTLIB_FIGURES: Explanation = Explanation {
    what: "matplotlib's figures",
    detail: "a figure keeps what it holds (its artists, and once drawn or saved its renderer's pixel buffer) as long as anything refers to it, and pyplot refers to every figure it opened (plt.figure, plt.subplots, plt.plot) until it is closed; call plt.close(fig) once a figure is saved, or make figures with matplotlib.figure.Figure, which pyplot does not keep. A closed figure and its artists refer to each other, so only Python's cycle collector frees it, which may not run for many epochs: where the program closes its figures already, call gc.collect() before each epoch's end to tell them from a leak",
    incidental_site: false,
    levels_off: false,
};

/// matplotlib's modules through which figures are made and drawn.
const MATPLOTLIB_FIGURE_MODULES: &[&str] = &["/matplotlib/pyplot.py", "/matplotlib/figure.py"];

/// What memory allocated while torch.compile compiled a function is.
const TORCH_COMPILE: Explanation = Explanation {
    what: "torch.compile's compiled code",
    detail: "each new input shape (or data type, or another change its guards check) has torch.compile trace and compile the function again and keep the result beside the earlier ones, up to torch._dynamo.config.recompile_limit (8) versions of a function, after which it runs uncompiled; mark the dimension that varies as dynamic (torch._dynamo.mark_dynamic, or dynamic=True) or pad inputs to a few fixed shapes",
    incidental_site: false,
    levels_off: true,
};

/// torch's modules that compile, which a compiled function's runs do not
/// pass through: dynamo's frame conversion, inductor's compile of a graph,
/// and the cache AOT autograd saves a compiled graph in.
const TORCH_COMPILE_MODULES: &[&str] = &[
    "/torch/_dynamo/convert_frame.py",
    "/torch/_inductor/compile_fx.py",
    "/torch/_functorch/_aot_autograd/autograd_cache.py",
];

/// Why `suspect`'s memory (with its stack `frames`) is kept, when one of
/// the known reasons shows on the stack.
pub fn explanation(trace: &Trace, suspect: &Suspect, frames: &[Frame]) -> Option<&'static Explanation> {
    explain(pymalloc_untraced(&trace.process), suspect.memory, frames)
}

fn explain(pymalloc: bool, memory: Memory, frames: &[Frame]) -> Option<&'static Explanation> {
    let native = || frames.iter().filter(|f| !f.python);
    let by_memory = match memory {
        Memory::Mapped => (pymalloc && maps_a_pymalloc_arena(frames)).then_some(&PYMALLOC_ARENAS),
        Memory::Shared => frames
            .iter()
            .any(|f| f.python && SHARED_TENSOR_REBUILDERS.contains(&f.function.as_str()))
            .then_some(&WORKER_BATCHES),
        Memory::Heap => None,
    };
    by_memory.or_else(|| {
        if native().any(|f| PROFILER_NAMESPACES.iter().any(|ns| f.function.contains(ns))) {
            Some(&PROFILER_RECORDS)
        } else if native().any(|f| {
            // Every primitive oneDNN makes goes through its cache; what one
            // made there outlives the call only as long as the cache keeps it.
            f.function.starts_with("dnnl::impl::")
                && (f.function.contains("primitive_cache") || f.function.starts_with("dnnl::impl::primitive_create("))
        }) {
            Some(&ONEDNN_PRIMITIVE_CACHE)
        } else if native().any(|f| f.function.starts_with("ideep::utils::computation_cache<")) {
            Some(&IDEEP_COMPUTATION_CACHE)
        } else if native().any(|f| f.function.starts_with("c10d::FlightRecorder")) {
            Some(&FLIGHT_RECORDER)
        } else if native().any(|f| MKL_MEMORY_MANAGER.contains(&f.function.as_str())) {
            Some(&MKL_BUFFERS)
        } else if through_python_module(frames, TORCH_COMPILE_MODULES) {
            Some(&TORCH_COMPILE)
        } else if through_python_module(frames, MATPLOTLIB_FIGURE_MODULES) {
            Some(&MATPLOTLIB_FIGURES)
        } else {
            None
        }
    })
}

/// Whether a Python frame of `frames` runs in a file ending with one of `modules`.
fn through_python_module(frames: &[Frame], modules: &[&str]) -> bool {
    frames.iter().any(|f| f.python && f.file.as_deref().is_some_and(|file| modules.iter().any(|m| file.ends_with(m))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn native(function: &str, module: &str) -> Frame {
        Frame { module: Some(module.into()), ..Frame::named(0x1000, function.into()) }
    }

    fn python(function: &str) -> Frame {
        Frame { python: true, ..Frame::named(0x10, function.into()) }
    }

    const TORCH: &str = "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so";

    #[test]
    fn the_profiler_records_are_told_by_its_callbacks_on_the_stack() {
        let stack = [
            native("torch::profiler::impl::ThreadLocalSubqueue::begin_op(at::RecordFunction const&)", TORCH),
            native("at::RecordFunction::runStartCallbacks()", TORCH),
            python("train_step"),
        ];
        assert_eq!(explain(false, Memory::Heap, &stack), Some(&PROFILER_RECORDS));
        let older = [native("torch::autograd::profiler::RecordProfile::processEvents()", TORCH)];
        assert_eq!(explain(false, Memory::Heap, &older), Some(&PROFILER_RECORDS));
        // A Python function of that name is not the profiler's C++ code.
        assert_eq!(explain(false, Memory::Heap, &[python("torch::profiler::impl::x")]), None);
    }

    #[test]
    fn the_onednn_primitive_cache_is_told_in_heap_and_mapped_memory() {
        let stack = [
            native("Xbyak::MmapAllocator::alloc(unsigned long)", TORCH),
            native(
                "dnnl::impl::primitive_cache_iface_t::get_or_create(dnnl::impl::primitive_hashing::key_t const&)",
                TORCH,
            ),
            python("new_shapes"),
        ];
        assert_eq!(explain(true, Memory::Mapped, &stack), Some(&ONEDNN_PRIMITIVE_CACHE));
        assert_eq!(explain(false, Memory::Heap, &stack), Some(&ONEDNN_PRIMITIVE_CACHE));
        // What a primitive's creation keeps beside it (its descriptor's info).
        let info = [
            native("dnnl::impl::pd_info_t::init(dnnl_engine*, dnnl::impl::primitive_desc_t const*)", TORCH),
            native("dnnl::impl::primitive_create(dnnl_primitive**, dnnl_primitive_desc const*, …)", TORCH),
            native("dnnl_primitive_create", TORCH),
        ];
        assert_eq!(explain(false, Memory::Heap, &info), Some(&ONEDNN_PRIMITIVE_CACHE));
        // oneDNN running a primitive it has is no cache growing.
        let run = [native("dnnl::impl::cpu::x64::jit_avx512_common_convolution_fwd_t::execute()", TORCH)];
        assert_eq!(explain(false, Memory::Heap, &run), None);
    }

    #[test]
    fn ideeps_descriptor_cache_is_told_by_its_cache_on_the_stack() {
        let stack = [
            native("dnnl::impl::convolution_desc_t::clone() const", TORCH),
            native("dnnl_convolution_forward_primitive_desc_create", TORCH),
            native("ideep::utils::computation_cache<dnnl::convolution_forward::primitive_desc, 1024ul, …>::fetch_or_create(…)", TORCH),
            native("at::native::mkldnn_convolution(…)", TORCH),
            python("new_shapes"),
        ];
        let told = explain(false, Memory::Heap, &stack);
        assert_eq!(told, Some(&IDEEP_COMPUTATION_CACHE));
        assert!(told.unwrap().levels_off);
        // A descriptor made for one call and freed with it has no cache on its stack.
        assert_eq!(explain(false, Memory::Heap, &[stack[0].clone(), stack[1].clone(), stack[3].clone()]), None);
    }

    #[test]
    fn mkls_buffer_pool_is_told_by_its_memory_manager_on_the_stack() {
        let stack = [
            native("mm_internal_malloc", TORCH),
            native("mkl_serv_allocate", TORCH),
            native("mkl_blas_avx512_sgemm_get_bufs", TORCH),
            native("sgemm_", TORCH),
            native("at::native::cpublas::gemm(…)", TORCH),
            python("train_step"),
        ];
        let told = explain(false, Memory::Heap, &stack);
        assert_eq!(told, Some(&MKL_BUFFERS));
        assert!(told.unwrap().levels_off);
        // A matrix multiply's output is no buffer of MKL's.
        let output = [native("c10::alloc_cpu(unsigned long)", TORCH), stack[4].clone(), python("train_step")];
        assert_eq!(explain(false, Memory::Heap, &output), None);
    }

    #[test]
    fn the_flight_recorder_is_told_by_its_record_call_on_the_stack() {
        let stack = [
            native("torch::CapturedTraceback::gather(bool, bool, bool)", TORCH),
            native("c10d::FlightRecorder<…>::recordWithResetEnabled(…)", TORCH),
            native("c10d::ProcessGroupGloo::allreduce(std::vector<…>&, c10d::AllreduceOptions const&)", TORCH),
            python("main"),
        ];
        assert_eq!(explain(true, Memory::Heap, &stack), Some(&FLIGHT_RECORDER));
        assert_eq!(explain(true, Memory::Heap, &stack[2..]), None, "a collective alone records nothing");
    }

    #[test]
    fn matplotlib_figures_are_told_by_its_figure_modules_on_the_stack() {
        let site = "/venv/lib/python3.11/site-packages/matplotlib";
        let in_file = |function: &str, file: &str| Frame { file: Some(file.into()), ..python(function) };
        let saved = [
            native("RendererAgg::RendererAgg(unsigned int, unsigned int, double)", "_backend_agg.so"),
            in_file("RendererAgg.__init__", &format!("{site}/backends/backend_agg.py")),
            in_file("Figure.savefig", &format!("{site}/figure.py")),
            in_file("<module>", "/job/train.py"),
        ];
        assert_eq!(explain(true, Memory::Heap, &saved), Some(&MATPLOTLIB_FIGURES));
        let plotted = [in_file("plot", &format!("{site}/pyplot.py")), in_file("<module>", "/job/train.py")];
        assert_eq!(explain(true, Memory::Mapped, &plotted), Some(&MATPLOTLIB_FIGURES));
        // Drawing code alone, or a program's own figure.py, is not pyplot's figures.
        let drawn = [in_file("RendererAgg.__init__", &format!("{site}/backends/backend_agg.py"))];
        assert_eq!(explain(false, Memory::Heap, &drawn), None);
        assert_eq!(explain(false, Memory::Heap, &[in_file("plot", "/job/figure.py")]), None);
    }

    #[test]
    fn torch_compile_is_told_by_its_compiling_modules_on_the_stack() {
        let torch = "/venv/lib/python3.11/site-packages/torch";
        let in_file = |function: &str, file: &str| Frame { file: Some(file.into()), ..python(function) };
        let compiled = [
            native("PyList_New", "/usr/lib/libpython3.11.so.1.0"),
            in_file("GraphLowering.run", &format!("{torch}/_inductor/graph.py")),
            in_file("_compile_fx_inner", &format!("{torch}/_inductor/compile_fx.py")),
            in_file("_compile", &format!("{torch}/_dynamo/convert_frame.py")),
            in_file("<module>", "/job/train.py"),
        ];
        let told = explain(true, Memory::Heap, &compiled);
        assert_eq!(told, Some(&TORCH_COMPILE));
        assert!(told.unwrap().levels_off);
        // A compiled function's run (what the program keeps of its outputs).
        let ran = [
            native("c10::alloc_cpu(unsigned long)", TORCH),
            in_file("Runner.call", "/tmp/torchinductor_me/xr/cxr4mfprg7moeqnrhee4qyuvqbdj52mcxlv5avnjl5fpewehz5lb.py"),
            in_file("CompiledFxGraph.__call__", &format!("{torch}/_inductor/output_code.py")),
            in_file("_fn", &format!("{torch}/_dynamo/eval_frame.py")),
            in_file("<module>", "/job/train.py"),
        ];
        assert_eq!(explain(true, Memory::Heap, &ran), None);
    }

    #[test]
    fn pymalloc_arenas_only_when_pymalloc_mapped_them() {
        let stack = [native("_PyObject_ArenaMmap", "/usr/lib/libpython3.11.so.1.0"), python("load")];
        assert_eq!(explain(true, Memory::Mapped, &stack), Some(&PYMALLOC_ARENAS));
        assert_eq!(explain(false, Memory::Mapped, &stack), None);
        assert_eq!(explain(true, Memory::Heap, &stack), None);
        let elsewhere = [native("_PyObject_ArenaMmap", "/opt/app/libother.so")];
        assert_eq!(explain(true, Memory::Mapped, &elsewhere), None);
    }

    #[test]
    fn worker_batches_are_shared_memory_mapped_by_the_rebuilders() {
        let stack = [python("rebuild_storage_fd"), python("train")];
        assert_eq!(explain(false, Memory::Shared, &stack), Some(&WORKER_BATCHES));
        assert_eq!(explain(false, Memory::Mapped, &stack), None);
    }

    #[test]
    fn an_explanation_reads_what_then_why() {
        let text = PROFILER_RECORDS.to_string();
        assert!(text.starts_with("the PyTorch profiler's records: while a profiler runs"), "{text}");
    }
}
