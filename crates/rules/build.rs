//! Builds the gpu matcher's kernel source (src/matcher/gpu/match.cu) for the host too, so
//! the tests check the device's matching logic on machines without a GPU.

fn main() {
    println!("cargo:rerun-if-changed=src/matcher/gpu/match.cu");
    println!("cargo:rerun-if-changed=src/matcher/gpu/host.c");
    cc::Build::new()
        .file("src/matcher/gpu/host.c")
        .opt_level(3)
        .flag_if_supported("-std=c99")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("offload_gpu_host");
}
