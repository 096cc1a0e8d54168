#![no_main]
// See captf_lock_exporter::fuzzing::watch_frame for what must hold.
libfuzzer_sys::fuzz_target!(|data: &[u8]| captf_lock_exporter::fuzzing::watch_frame(data));
