/* pause.c - the pod sandbox's init process for the e2e tests' local image.
 *
 * kubelet starts one "pause" container per pod to hold its namespaces. The
 * e2e harness builds its images without a registry, so it needs its own:
 * this program sleeps until SIGTERM or SIGINT, reaping any child that is
 * re-parented to it (it is PID 1 of the pod's PID namespace when that is
 * shared). Built statically by tests/e2e/kcluster.py with `cc -static`.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t pause_stop;

static void pause_on_stop(int sig)
{
    (void)sig;
    pause_stop = 1;
}

static void pause_on_child(int sig)
{
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    errno = saved;
}

int main(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = pause_on_stop;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    sa.sa_handler = pause_on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    while (!pause_stop)
        pause();
    return 0;
}
