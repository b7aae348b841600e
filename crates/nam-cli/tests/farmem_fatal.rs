//! A fatal far-memory error ends the process within a deadline whatever signal handlers the
//! program installed: a C program under the `LD_PRELOAD` library keeps 32 MiB in far memory
//! (4 MiB resident), installs SIGABRT and SIGSEGV handlers that read that memory again (as
//! a crash reporter that dumps the program's state does), and keeps reading it after its
//! memory server is killed. In both fault modes it must end with the library's fatal
//! message naming the server and `nam_farmem::FATAL_EXIT_STATUS`, its handlers never run.
//! With `abort()` the thread-mode pager's thread ran the SIGABRT handler itself, faulted
//! on a page only it could serve, and the process hung for ever.

mod common;

use common::ServerProcess;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(20);

const PROGRAM: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define BYTES ((size_t)32 << 20)
static volatile unsigned char *far;
static unsigned long sweep(void) {
    unsigned long sum = 0;
    for (size_t i = 0; i < BYTES; i += 4096) sum += far[i];
    return sum;
}
static void handler(int sig) {
    /* A crash reporter's dump of the program's state: it reads far memory. */
    unsigned long sum = sweep();
    char line[96];
    int n = snprintf(line, sizeof line, "own handler of signal %d ran, sum %lu\n", sig, sum);
    write(1, line, n);
    _exit(3);
}
int main(void) {
    far = malloc(BYTES);
    if (far == NULL) return 2;
    memset((void *)far, 1, BYTES);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigaction(SIGABRT, &sa, NULL);
    sigaction(SIGSEGV, &sa, NULL);
    printf("ready\n");
    fflush(stdout);
    char go[8];
    if (fgets(go, sizeof go, stdin) == NULL) return 2;
    for (;;) sweep();
}
"#;

#[test]
fn a_dead_server_ends_a_program_with_its_own_signal_handlers_within_a_deadline() {
    let preload = common::lib_dir().join("libnam_farmem_preload.so");
    assert!(preload.exists(), "{} missing: run `cargo build --workspace` first", preload.display());
    let dir = common::temp_dir("fatal");
    let (source, program) = (dir.join("fatal.c"), dir.join("fatal"));
    std::fs::write(&source, PROGRAM).unwrap();
    let cc = Command::new("cc").arg(&source).args(["-O1", "-o"]).arg(&program).output().expect("run cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    for mode in ["thread", "signal"] {
        // Over TCP the dead server's connection fails at once (a shared-memory segment could
        // still be read after its owner died).
        let mut server = ServerProcess::start("tcp", &[]);
        let mut child = Command::new(&program)
            .env("LD_PRELOAD", &preload)
            .env("NAM_SERVERS", server.addr.to_string())
            .env("NAM_TRANSPORTS", "tcp")
            .env("NAM_FARMEM_FAULT_MODE", mode)
            .env("NAM_FARMEM_BYTES", "64MiB")
            .env("NAM_FARMEM_LOCAL_BYTES", "4MiB")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the C program");
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{mode}: the program did not start");
        let dead = server.addr;
        let started = Instant::now();
        server.kill();
        // The pager may already have ended the process (a write-back of the pages the
        // program filled meets the dead server), and then the pipe is closed.
        let _ = child.stdin.take().unwrap().write_all(b"go\n");
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() >= DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        let stderr = stderr.join().unwrap();
        let status = status
            .unwrap_or_else(|| panic!("{mode}: still running {DEADLINE:?} after its server died: {rest}{stderr}"));
        assert_eq!(status.code(), Some(nam_farmem::FATAL_EXIT_STATUS), "{mode}: {status}: {rest}{stderr}");
        assert!(!rest.contains("own handler"), "{mode}: the program's handler ran: {rest}");
        assert!(stderr.contains("nam-farmem: fatal") && stderr.contains(&dead.to_string()), "{mode}: {stderr}");
        eprintln!("{mode}: ended {:?} after the server was killed", started.elapsed());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
