//! The page's entry point (see the `app` library).
fn main() {
    app::main();
}
