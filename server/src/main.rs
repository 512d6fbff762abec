//! The `mpm` command: serve a document root (or the embedded welcome site)
//! under a process model chosen at launch. The first user of [`mpm::main`].

fn main() {
    std::process::exit(mpm::main(mpm::StaticSite::default()));
}
