//! The `mpm` command: serve a document root (or the embedded welcome site)
//! under a process model chosen at launch.

mod cli;
mod signal_command;
mod site;

fn main() {
    std::process::exit(cli::main());
}
