//! The `tenax` binary: parse the command line, run the command, turn errors into exit codes.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of the system allocator: the server allocates many small, short-lived
/// buffers from many threads, where glibc's malloc spent a quarter of the delivery benchmark's
/// CPU time, much of it contending on its arena locks (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = tenax::cli::Cli::parse();
    match tenax::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // The message may quote the server, which may quote anyone's input.
            eprintln!("error: {}", tenax::cli::terminal::safe(&error.to_string()));
            ExitCode::from(error.exit_code())
        }
    }
}
