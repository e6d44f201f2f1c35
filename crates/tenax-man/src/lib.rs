//! Tenax's man pages, rendered from the command line's clap definition: one page for `tenax`
//! and one for each subcommand at any depth (`tenax-serve.1`, `tenax-jobs-list.1`, …).
//! `deploy/man/` holds them committed; the Debian package installs them.

use std::path::Path;

use clap::CommandFactory;

/// Where the committed pages live, from the workspace root.
pub const MAN_DIR: &str = "deploy/man";

/// Every page: its file name and its roff text, sorted by name.
pub fn render() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut command = tenax::cli::Cli::command();
    command.build();
    let mut pages = Vec::new();
    render_into(&command, "tenax", &mut pages)?;
    pages.sort();
    Ok(pages)
}

fn render_into(
    command: &clap::Command,
    name: &str,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> std::io::Result<()> {
    // The page's title names the command as typed (`tenax-jobs-list`), as man(1) finds it.
    let titled = command
        .clone()
        .display_name(name)
        .bin_name(name.replace('-', " "));
    let mut text = Vec::new();
    clap_mangen::Man::new(titled).render(&mut text)?;
    pages.push((format!("{name}.1"), text));
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        render_into(sub, &format!("{name}-{}", sub.get_name()), pages)?;
    }
    Ok(())
}

/// Writes every page into `dir`, removing `.1` files there that no command has any more.
pub fn write(dir: &Path) -> std::io::Result<usize> {
    let pages = render()?;
    std::fs::create_dir_all(dir)?;
    for stale in stale_pages(dir, &pages)? {
        std::fs::remove_file(dir.join(stale))?;
    }
    for (name, text) in &pages {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(pages.len())
}

/// What differs between the pages in `dir` and the command line: pages missing or different,
/// and pages of commands that are gone. Empty when they match.
pub fn differences(dir: &Path) -> std::io::Result<Vec<String>> {
    let pages = render()?;
    let mut found = Vec::new();
    for (name, text) in &pages {
        match std::fs::read(dir.join(name)) {
            Ok(committed) if committed == *text => {}
            Ok(_) => found.push(format!("{name}: differs from the command line")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                found.push(format!("{name}: missing"));
            }
            Err(e) => return Err(e),
        }
    }
    for stale in stale_pages(dir, &pages)? {
        found.push(format!("{stale}: no such command any more"));
    }
    Ok(found)
}

fn stale_pages(dir: &Path, pages: &[(String, Vec<u8>)]) -> std::io::Result<Vec<String>> {
    let mut stale = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(stale),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".1") && !pages.iter().any(|(page, _)| *page == name) {
            stale.push(name);
        }
    }
    stale.sort();
    Ok(stale)
}
