fn main() {
    std::process::exit(analyzer::cli::main());
}
