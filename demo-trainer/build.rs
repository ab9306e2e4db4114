//! Compiles the small C++ shim against libtorch's headers and records an rpath
//! to libtorch's lib directory, so the binary runs without LD_LIBRARY_PATH.

use std::path::PathBuf;

fn main() {
    // torch-sys (`links = "tch"`) passes its libtorch lib directory on.
    let lib = std::env::var("DEP_TCH_LIBTORCH_LIB")
        .expect("torch-sys did not report libtorch's lib directory");
    let lib = PathBuf::from(lib);
    let include = lib.parent().expect("libtorch lib dir has a parent").join("include");

    println!("cargo:rerun-if-changed=csrc/device_cache.cpp");
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag("-D_GLIBCXX_USE_CXX11_ABI=1")
        .flag("-DGLOG_USE_GLOG_EXPORT")
        .file("csrc/device_cache.cpp")
        .compile("demo_device_cache");

    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=torch_cpu");
    println!("cargo:rustc-link-lib=dylib=c10");
    // Nothing references libtorch_cuda directly, so an as-needed link would
    // drop it, and without it libtorch never sees a GPU.
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
