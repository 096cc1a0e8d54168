//! The exporter binary as a child process of a test.
#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_captf-lock-exporter");

/// Kills the child when the test ends, pass or fail.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("binds")
        .local_addr()
        .expect("addr")
        .port()
}

/// The binary in demo mode on `port`, quiet.
pub fn demo(port: u16) -> Child {
    Command::new(BIN)
        .args([
            "demo",
            "--listen-address",
            &format!("127.0.0.1:{port}"),
            "--log-level",
            "warn",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts")
}
