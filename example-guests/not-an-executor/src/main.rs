//! A plain WASI command: a valid component of the wrong world, which the host must refuse
//! at load time with the reason.

fn main() {
    println!("I am not a Snodo executor");
}
