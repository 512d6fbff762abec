//! Writes `code.rs`: `STATEMENTS` straight-line statements for `footprint.py`'s experiment, each
//! with constants of its own so that the compiler can neither fold nor loop them (about 20 bytes of
//! code each). FLOOR_CODE_STATEMENTS sets how many are run; FLOOR_CODE_DISTINCT=D (default: all
//! of them) writes only D of them, in a loop run STATEMENTS / D times: as much work in a few bytes
//! of code, the experiment's control. Unset or 0, the function is empty and never called, and the
//! floor is the floor.
use std::{env, fs, path::Path};

fn main() {
    println!("cargo:rerun-if-env-changed=FLOOR_CODE_STATEMENTS");
    println!("cargo:rerun-if-env-changed=FLOOR_CODE_DISTINCT");
    let var = |name: &str| env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let n = var("FLOOR_CODE_STATEMENTS").unwrap_or(0);
    let distinct = var("FLOOR_CODE_DISTINCT").unwrap_or(n).clamp(1.min(n), n);
    let mut src = format!("pub const STATEMENTS: usize = {n};\n");
    // Empty (n = 0), the function is never called and its arguments are not used.
    src.push_str("#[allow(unused_mut, unused_variables)]\n#[inline(never)]\n");
    src.push_str("pub fn code(mut acc: u64, buf: &[u8; 1024]) -> u64 {\n");
    // Straight-line code is written without the loop (rustc's stack does not take a loop of
    // thousands of statements).
    let looped = distinct < n;
    if looped {
        src.push_str(&format!("    for _ in 0..std::hint::black_box({}usize) {{\n", n / distinct));
    }
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..distinct {
        // A fixed linear congruential sequence: the same code in every build.
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let (k, r, i) = (x | 1, 1 + (x >> 20) % 63, (x >> 40) % 1024);
        src.push_str(&format!("    acc = acc.wrapping_mul({k}).rotate_left({r}) ^ u64::from(buf[{i}]);\n"));
    }
    if looped {
        src.push_str("    }\n");
    }
    src.push_str("    acc\n}\n");
    let out = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("code.rs");
    fs::write(out, src).expect("OUT_DIR is writable");
}
