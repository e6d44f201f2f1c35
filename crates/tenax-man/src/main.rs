//! `cargo run -p tenax-man` writes Tenax's man pages to deploy/man/ (or the directory given);
//! `cargo run -p tenax-man -- --check` says whether the committed ones match the command line.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut dir = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("usage: tenax-man [--check] [DIR]   (DIR: deploy/man by default)");
                return ExitCode::SUCCESS;
            }
            _ if dir.is_none() => dir = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("tenax-man: unexpected argument {arg:?}");
                return ExitCode::from(2);
            }
        }
    }
    let dir = dir.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(tenax_man::MAN_DIR)
    });
    if check {
        match tenax_man::differences(&dir) {
            Ok(found) if found.is_empty() => {
                println!("man pages in {} match the command line", dir.display());
                ExitCode::SUCCESS
            }
            Ok(found) => {
                for line in found {
                    eprintln!("{line}");
                }
                eprintln!("run `cargo run -p tenax-man` and commit deploy/man/");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("tenax-man: {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        }
    } else {
        match tenax_man::write(&dir) {
            Ok(count) => {
                println!("wrote {count} man pages to {}", dir.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tenax-man: {}: {e}", dir.display());
                ExitCode::FAILURE
            }
        }
    }
}
