#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
static void handler(int sig, siginfo_t *si, void *ctx) {
    void *frames[64];
    ucontext_t *uc = ctx;
    void *pc = (void *)uc->uc_mcontext.gregs[REG_RIP];
    fprintf(stderr, "SEGV at addr %p pc %p\n", si->si_addr, pc);
    int n = backtrace(frames, 64);
    frames[1] = pc;
    for (int i = 1; i < n; i++) {
        Dl_info info;
        if (dladdr(frames[i], &info) && info.dli_fname)
            fprintf(stderr, "#%d %s+0x%lx (%s)\n", i, info.dli_fname,
                    (unsigned long)((char *)frames[i] - (char *)info.dli_fbase),
                    info.dli_sname ? info.dli_sname : "?");
        else
            fprintf(stderr, "#%d %p\n", i, frames[i]);
    }
    fflush(stderr);
    signal(sig, SIG_DFL);
    raise(sig);
}
__attribute__((constructor)) static void init(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, NULL);
}
