#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ingress::fuzzing::canonical_fingerprint(data);
});
