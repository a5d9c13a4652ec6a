/* cpuid_mask.c: present a lower x86 CPU class to one process, at native speed.
 *
 * XNNPACK (inside litert-lm and ai_edge_litert) picks its kernels from CPUID at run time and has no
 * switch to force a lower instruction set. Linux CPUID faulting (arch_prctl(ARCH_SET_CPUID, 0); the
 * host lists `cpuid_fault` in /proc/cpuinfo) makes every CPUID instruction of this thread and the
 * threads it starts raise SIGSEGV. This library, preloaded (LD_PRELOAD), turns faulting on in its
 * constructor and answers each CPUID from a SIGSEGV handler: it runs the real CPUID with faulting
 * off for that instant, clears the bits named in CPUID_MASK_CLEAR, and steps over the instruction.
 *
 *   CPUID_MASK_CLEAR="leaf.subleaf.reg=hexmask,..."   e.g. "7.0.ebx=0xd0230000,7.1.eax=0x30"
 *
 * Written by the farm (farm_common/cpu_classes.py computes the masks); built with gcc when the
 * toolchain env is installed. Only features the host has can be removed, never added.
 *
 * Another library may install its own SIGSEGV handler later (Python's faulthandler, a runtime's crash
 * reporter): `sigaction` and `signal` are wrapped so that ours stays installed and theirs is called
 * for every SIGSEGV that is not a CPUID. Faulting is reset by execve; a child that keeps
 * LD_PRELOAD and CPUID_MASK_CLEAR in its environment is masked again by this constructor.
 * If faulting cannot be turned on, the process writes one line and exits 86: a class that could not
 * be presented must never run as the host's.
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_MASKS 32
#define EXIT_NOT_PRESENTED 86

struct mask { uint32_t leaf, subleaf; int reg; uint32_t clear; };
static struct mask masks[MAX_MASKS];
static int n_masks;
static struct sigaction theirs;  /* the handler someone else asked for (SIG_DFL until then) */
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static long set_cpuid(int on) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, on); }

static int reg_index(const char *name) {
    static const char *names[] = {"eax", "ebx", "ecx", "edx"};
    for (int i = 0; i < 4; i++)
        if (strncmp(name, names[i], 3) == 0) return i;
    return -1;
}

static void parse_masks(const char *spec) {
    char buf[1024];
    strncpy(buf, spec, sizeof buf - 1);
    buf[sizeof buf - 1] = 0;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && n_masks < MAX_MASKS;
         item = strtok_r(NULL, ",", &save)) {
        unsigned leaf, subleaf, clear;
        char reg[4] = {0};
        if (sscanf(item, "%x.%x.%3[a-z]=%x", &leaf, &subleaf, reg, &clear) == 4 && reg_index(reg) >= 0)
            masks[n_masks++] = (struct mask){leaf, subleaf, reg_index(reg), clear};
        else {
            fprintf(stderr, "cpuid_mask: cannot read %s in CPUID_MASK_CLEAR\n", item);
            _exit(EXIT_NOT_PRESENTED);
        }
    }
}

static void call_theirs(int sig, siginfo_t *info, void *uctx) {
    if (theirs.sa_flags & SA_SIGINFO) {
        if (theirs.sa_sigaction) { theirs.sa_sigaction(sig, info, uctx); return; }
    } else if (theirs.sa_handler != SIG_DFL && theirs.sa_handler != SIG_IGN) {
        theirs.sa_handler(sig);
        return;
    }
    /* Default action: give the signal back to the kernel; the faulting instruction runs again and
     * the process ends the way it would have without this library. */
    struct sigaction dfl = {0};
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &dfl, NULL);
}

static void on_segv(int sig, siginfo_t *info, void *uctx) {
    ucontext_t *uc = uctx;
    greg_t *g = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    if (info->si_code != SI_KERNEL || ip == NULL || ip[0] != 0x0f || ip[1] != 0xa2) {
        call_theirs(sig, info, uctx);
        return;
    }
    uint32_t leaf = (uint32_t)g[REG_RAX], subleaf = (uint32_t)g[REG_RCX], r[4];
    set_cpuid(1);
    __cpuid_count(leaf, subleaf, r[0], r[1], r[2], r[3]);
    set_cpuid(0);
    for (int i = 0; i < n_masks; i++)
        if (masks[i].leaf == leaf && masks[i].subleaf == subleaf) r[masks[i].reg] &= ~masks[i].clear;
    g[REG_RAX] = r[0];
    g[REG_RBX] = r[1];
    g[REG_RCX] = r[2];
    g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction) real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (sig != SIGSEGV || n_masks == 0) return real_sigaction(sig, act, old);
    if (old) *old = theirs;
    if (act) theirs = *act;
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction act = {0}, old;
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_RESTART;
    if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
    return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)old.sa_sigaction : old.sa_handler;
}

__attribute__((constructor)) static void start(void) {
    real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    const char *spec = getenv("CPUID_MASK_CLEAR");
    if (!spec || !*spec) return;
    parse_masks(spec);
    if (n_masks == 0) return;
    theirs.sa_handler = SIG_DFL;
    struct sigaction ours = {0};
    ours.sa_sigaction = on_segv;
    ours.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&ours.sa_mask);
    if (real_sigaction(SIGSEGV, &ours, NULL) != 0 || set_cpuid(0) != 0) {
        fprintf(stderr, "cpuid_mask: CPUID faulting is not available on this host (no cpuid_fault): "
                        "the class cannot be presented\n");
        _exit(EXIT_NOT_PRESENTED);
    }
}
