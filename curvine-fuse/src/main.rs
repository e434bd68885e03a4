//! `curvine-fuse`: the FUSE mount is not built yet; it lands with its own issue.

fn main() {
    eprintln!("curvine-fuse: not implemented yet (tracked by the FUSE issue)");
    std::process::exit(2);
}
