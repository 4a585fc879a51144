/* kolo-fleet: N simulated kolo-worker agents in one process (fleet_agent.h), against a
 * real etcd and real kolo-servers, for the control plane's scale runs (bench/scale/run.py)
 * and its short CI version. Each agent has its own etcd client, lease, keep-alive thread
 * and assignment watch, as a real agent has; the agents are ticked by --threads threads.
 * Churn, built in or asked for on stdin one command a line:
 *   kill       a busy worker dies (SIGKILL of agent and process: its lease expires; its
 *              ring neighbours report FAILED naming its rank --detect-ms later, as libkolo)
 *   drain      a busy worker is drained (SIGTERM: it leaves its job at its next step, exits)
 *   join N     N new workers register
 *   churn K D R  from now on kill every K ms, drain every D ms, replace after R ms (0: off)
 *   hold 1|0   1: no agent idles (one without a job leaves at once) and none rejoins, so a
 *              real job's re-form can be measured without simulated newcomers; 0: as before
 *   stats      one JSON line on stdout: agents, busy
 *   quit       every agent deregisters; the fleet exits (also on stdin's end, SIGTERM)
 * A lost or drained worker is replaced by a new one --rejoin-ms later (0: never).
 * --events FILE: one JSON line per agent event (registered, assigned, formed, failed,
 * exited, idle, left, lost, kill, drain) with the wall-clock time in ms, from which
 * run.py computes e.g. a loss -> new ring delay. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench/scale/fleet_agent.h"

typedef struct fleet fleet;

typedef struct slot {
  fleet *f;
  kolo_fleet_agent *agent;
  int thread;
  /* what the fleet knows of its process (under the fleet lock, from events) */
  int running, gone;
  char job[129];
  int64_t epoch, rank, step;
} slot;

struct fleet {
  const char *etcd, *prefix, *events_path;
  int workers, threads, hosts, form_ms, step_ms, report_ms, detect_ms, rejoin_ms;
  int kill_every_ms, drain_every_ms, duration_s;
  int64_t next_kill, next_drain; /* the main thread's */
  int hold;                      /* no agent idles, rejoins wait (the main thread's) */
  int64_t lease_ttl_s, steps;
  pthread_mutex_t lock; /* slots, their fleet-side fields, the events file */
  slot **slots;
  size_t n_slots, cap_slots, next_id;
  FILE *events;
  atomic_int stop;
  int64_t rejoin_due[4096];
  size_t n_rejoin;
};

static int64_t mono_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int64_t wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* Under f->lock. */
static void log_event(fleet *f, const char *what, const char *worker, const char *job,
                      int64_t epoch, int64_t detail) {
  if (f->events == NULL) return;
  fprintf(f->events,
          "{\"t\":%" PRId64 ",\"ev\":\"%s\",\"worker\":\"%s\",\"job\":\"%s\",\"epoch\":%" PRId64
          ",\"detail\":%" PRId64 "}\n",
          wall_ms(), what, worker, job ? job : "", epoch, detail);
}

static void on_event(void *user, const kolo_fleet_agent *a, const char *what, const char *job,
                     int64_t epoch, int64_t detail) {
  slot *s = user;
  fleet *f = s->f;
  pthread_mutex_lock(&f->lock);
  {
    if (strcmp(what, "assigned") == 0) {
      s->running = 1;
      snprintf(s->job, sizeof s->job, "%s", job);
      s->epoch = epoch;
      s->rank = detail;
    } else if (strcmp(what, "step") == 0) {
      s->step = detail;
    } else if (strcmp(what, "exited") == 0) {
      s->running = 0;
    } else if (strcmp(what, "left") == 0 || strcmp(what, "lost") == 0) {
      s->running = 0;
      s->gone = 1;
      if (f->rejoin_ms > 0 && f->n_rejoin < sizeof f->rejoin_due / sizeof f->rejoin_due[0])
        f->rejoin_due[f->n_rejoin++] = mono_ms() + f->rejoin_ms;
    }
  }
  if (strcmp(what, "step") != 0) log_event(f, what, kolo_fleet_agent_id(a), job, epoch, detail);
  pthread_mutex_unlock(&f->lock);
}

static int64_t job_step(void *user, const char *job) {
  fleet *f = ((slot *)user)->f;
  int64_t best = 0;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_slots; i++)
    if (!f->slots[i]->gone && strcmp(f->slots[i]->job, job) == 0 && f->slots[i]->step > best)
      best = f->slots[i]->step;
  pthread_mutex_unlock(&f->lock);
  return best;
}

/* Registers one new agent (the caller does not hold the lock). */
static int join_one(fleet *f) {
  pthread_mutex_lock(&f->lock);
  size_t n = f->next_id++;
  pthread_mutex_unlock(&f->lock);
  char id[128], host[64], address[96];
  snprintf(id, sizeof id, "%s-%05zu", f->prefix, n);
  snprintf(host, sizeof host, "%s-host-%03zu", f->prefix, n % (size_t)f->hosts);
  snprintf(address, sizeof address, "%s:%zu", host, 20000 + n % 40000);
  slot *s = calloc(1, sizeof *s);
  if (s == NULL) return -1;
  s->f = f;
  s->thread = (int)(n % (size_t)f->threads);
  pthread_mutex_lock(&f->lock); /* listed first: the start's events find it */
  if (f->n_slots == f->cap_slots) {
    size_t cap = f->cap_slots ? f->cap_slots * 2 : 1024;
    slot **grown = realloc(f->slots, cap * sizeof *grown);
    if (grown == NULL) {
      pthread_mutex_unlock(&f->lock);
      free(s);
      return -1;
    }
    f->slots = grown;
    f->cap_slots = cap;
  }
  f->slots[f->n_slots++] = s;
  pthread_mutex_unlock(&f->lock);
  kolo_fleet_agent_config c = {.etcd_url = f->etcd,
                               .id = id,
                               .host = host,
                               .address = address,
                               .lease_ttl_s = f->lease_ttl_s,
                               .form_ms = f->form_ms,
                               .step_ms = f->step_ms,
                               .steps = f->steps,
                               .report_ms = f->report_ms,
                               .on_event = on_event,
                               .job_step = job_step,
                               .user = s};
  kolo_fleet_agent *a = NULL;
  kolo_status rc = kolo_fleet_agent_start(&c, &a);
  pthread_mutex_lock(&f->lock);
  s->agent = a;
  s->gone = rc != KOLO_OK;
  pthread_mutex_unlock(&f->lock);
  if (rc != KOLO_OK) {
    fprintf(stderr, "kolo-fleet: worker %s cannot register: %s (%s)\n", id, kolo_strerror(rc),
            kolo_etcd_last_error());
    return -1;
  }
  return 0;
}

/* A random busy worker: killed (its ring told) or drained. */
static void churn(fleet *f, int kill) {
  pthread_mutex_lock(&f->lock);
  size_t busy = 0;
  for (size_t i = 0; i < f->n_slots; i++) busy += f->slots[i]->running && !f->slots[i]->gone;
  if (busy == 0) {
    pthread_mutex_unlock(&f->lock);
    return;
  }
  size_t pick = (size_t)random() % busy;
  slot *v = NULL;
  for (size_t i = 0; i < f->n_slots && v == NULL; i++)
    if (f->slots[i]->running && !f->slots[i]->gone && pick-- == 0) v = f->slots[i];
  log_event(f, kill ? "kill" : "drain", kolo_fleet_agent_id(v->agent), v->job, v->epoch, v->rank);
  if (kill) {
    kolo_fleet_agent_kill(v->agent);
    int64_t at = mono_ms() + f->detect_ms;
    for (size_t i = 0; i < f->n_slots; i++) {
      slot *s = f->slots[i];
      if (s != v && s->running && !s->gone && s->epoch == v->epoch && strcmp(s->job, v->job) == 0)
        kolo_fleet_agent_peer_lost(s->agent, v->job, v->epoch, (int)v->rank, at);
    }
    v->running = 0;
  } else {
    kolo_fleet_agent_drain(v->agent);
  }
  fflush(f->events);
  pthread_mutex_unlock(&f->lock);
}

typedef struct ticker {
  fleet *f;
  int index;
} ticker;

static void *tick_main(void *arg) {
  ticker *t = arg;
  fleet *f = t->f;
  kolo_fleet_agent **mine = NULL;
  size_t cap = 0;
  while (!atomic_load(&f->stop)) {
    int64_t now = mono_ms();
    size_t n = 0;
    pthread_mutex_lock(&f->lock); /* this thread's live agents, once a round */
    if (cap < f->n_slots) {
      kolo_fleet_agent **grown = realloc(mine, f->n_slots * sizeof *grown);
      if (grown) {
        mine = grown;
        cap = f->n_slots;
      }
    }
    for (size_t i = 0; i < f->n_slots && n < cap; i++)
      if (f->slots[i]->thread == t->index && f->slots[i]->agent && !f->slots[i]->gone)
        mine[n++] = f->slots[i]->agent;
    pthread_mutex_unlock(&f->lock);
    for (size_t i = 0; i < n && !atomic_load(&f->stop); i++)
      kolo_fleet_agent_tick(mine[i], mono_ms());
    int64_t spent = mono_ms() - now;
    if (spent < 10) usleep((useconds_t)(10 - spent) * 1000);
  }
  free(mine);
  return NULL;
}

static void stats(fleet *f) {
  pthread_mutex_lock(&f->lock);
  size_t agents = 0, busy = 0;
  for (size_t i = 0; i < f->n_slots; i++) {
    agents += !f->slots[i]->gone;
    busy += !f->slots[i]->gone && f->slots[i]->running;
  }
  pthread_mutex_unlock(&f->lock);
  printf("{\"agents\":%zu,\"busy\":%zu}\n", agents, busy);
  fflush(stdout);
}

/* One stdin command; 0 to quit. */
static int command(fleet *f, char *line) {
  line[strcspn(line, "\r\n")] = '\0';
  if (strcmp(line, "quit") == 0) return 0;
  if (strcmp(line, "kill") == 0) churn(f, 1);
  if (strcmp(line, "drain") == 0) churn(f, 0);
  if (strcmp(line, "stats") == 0) stats(f);
  int k, d, r, h;
  if (sscanf(line, "hold %d", &h) == 1) { /* every agent, and no rejoin meanwhile */
    f->hold = h;
    pthread_mutex_lock(&f->lock);
    for (size_t i = 0; i < f->n_slots; i++)
      if (f->slots[i]->agent && !f->slots[i]->gone) kolo_fleet_agent_hold(f->slots[i]->agent, h);
    pthread_mutex_unlock(&f->lock);
  }
  if (sscanf(line, "churn %d %d %d", &k, &d, &r) == 3) { /* new rates from now on */
    f->kill_every_ms = k;
    f->drain_every_ms = d;
    pthread_mutex_lock(&f->lock);
    f->rejoin_ms = r;
    pthread_mutex_unlock(&f->lock);
    f->next_kill = mono_ms() + k;
    f->next_drain = mono_ms() + d;
  }
  if (strncmp(line, "join ", 5) == 0)
    for (long n = strtol(line + 5, NULL, 10); n > 0; n--) join_one(f);
  return 1;
}

static void usage(void) {
  fprintf(stderr,
          "usage: kolo-fleet --etcd URL [--workers N] [--prefix P] [--threads T] [--hosts H]\n"
          "  [--lease-ttl S] [--form-ms MS] [--step-ms MS] [--steps N] [--report-ms MS]\n"
          "  [--detect-ms MS] [--kill-every-ms MS] [--drain-every-ms MS] [--rejoin-ms MS]\n"
          "  [--duration-s S] [--events FILE] [--seed N]\n");
}

static int parse(fleet *f, int argc, char **argv) {
  static const struct option longs[] = {
      {"etcd", 1, 0, 'e'},           {"workers", 1, 0, 'n'},   {"prefix", 1, 0, 'p'},
      {"threads", 1, 0, 't'},        {"hosts", 1, 0, 'H'},     {"lease-ttl", 1, 0, 'l'},
      {"form-ms", 1, 0, 'f'},        {"step-ms", 1, 0, 's'},   {"steps", 1, 0, 'S'},
      {"report-ms", 1, 0, 'r'},      {"detect-ms", 1, 0, 'd'}, {"kill-every-ms", 1, 0, 'k'},
      {"drain-every-ms", 1, 0, 'D'}, {"rejoin-ms", 1, 0, 'j'}, {"duration-s", 1, 0, 'T'},
      {"events", 1, 0, 'E'},         {"seed", 1, 0, 'x'},      {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    long v = optarg ? strtol(optarg, NULL, 10) : 0;
    switch (opt) {
      case 'e':
        f->etcd = optarg;
        break;
      case 'n':
        f->workers = (int)v;
        break;
      case 'p':
        f->prefix = optarg;
        break;
      case 't':
        f->threads = (int)v;
        break;
      case 'H':
        f->hosts = (int)v;
        break;
      case 'l':
        f->lease_ttl_s = v;
        break;
      case 'f':
        f->form_ms = (int)v;
        break;
      case 's':
        f->step_ms = (int)v;
        break;
      case 'S':
        f->steps = v;
        break;
      case 'r':
        f->report_ms = (int)v;
        break;
      case 'd':
        f->detect_ms = (int)v;
        break;
      case 'k':
        f->kill_every_ms = (int)v;
        break;
      case 'D':
        f->drain_every_ms = (int)v;
        break;
      case 'j':
        f->rejoin_ms = (int)v;
        break;
      case 'T':
        f->duration_s = (int)v;
        break;
      case 'E':
        f->events_path = optarg;
        break;
      case 'x':
        srandom((unsigned)v);
        break;
      default:
        return -1;
    }
  }
  if (f->etcd == NULL || f->workers < 0 || f->threads < 1 || f->threads > 256 || f->hosts < 1 ||
      f->lease_ttl_s < 1 || f->step_ms < 1 || f->steps < 1 || f->report_ms < 0 || f->form_ms < 0) {
    fprintf(stderr, "kolo-fleet: bad or missing options\n");
    return -1;
  }
  return 0;
}

static void raise_fd_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

/* The main loop: stdin commands, built-in churn, rejoins, the duration. */
static void run(fleet *f) {
  int64_t start = mono_ms();
  f->next_kill = start + f->kill_every_ms;
  f->next_drain = start + f->drain_every_ms;
  int in_open = 1;
  char line[256];
  while (!atomic_load(&f->stop)) {
    struct pollfd p = {.fd = 0, .events = POLLIN};
    if (in_open && poll(&p, 1, 50) > 0) {
      if (fgets(line, sizeof line, stdin) == NULL || !command(f, line)) break;
    } else if (!in_open) {
      usleep(50 * 1000);
    }
    int64_t now = mono_ms();
    if (f->kill_every_ms > 0 && now >= f->next_kill) {
      churn(f, 1);
      f->next_kill += f->kill_every_ms;
    }
    if (f->drain_every_ms > 0 && now >= f->next_drain) {
      churn(f, 0);
      f->next_drain += f->drain_every_ms;
    }
    pthread_mutex_lock(&f->lock);
    size_t due = 0;
    for (size_t i = 0; i < f->n_rejoin;)
      if (f->rejoin_due[i] <= now && !f->hold) {
        f->rejoin_due[i] = f->rejoin_due[--f->n_rejoin];
        due++;
      } else {
        i++;
      }
    pthread_mutex_unlock(&f->lock);
    while (due-- > 0) join_one(f);
    if (f->duration_s > 0 && now - start >= (int64_t)f->duration_s * 1000) break;
  }
}

static fleet *the_fleet;
static void on_signal(int sig) {
  (void)sig;
  if (the_fleet) atomic_store(&the_fleet->stop, 1);
}

int main(int argc, char **argv) {
  fleet f = {.prefix = "sim",
             .workers = 100,
             .threads = 8,
             .hosts = 125,
             .lease_ttl_s = 3,
             .form_ms = 200,
             .step_ms = 100,
             .steps = 300,
             .report_ms = 500,
             .detect_ms = 5};
  if (parse(&f, argc, argv) != 0) {
    usage();
    return 2;
  }
  raise_fd_limit();
  pthread_mutex_init(&f.lock, NULL);
  if (f.events_path && (f.events = fopen(f.events_path, "w")) == NULL) {
    fprintf(stderr, "kolo-fleet: %s: %s\n", f.events_path, strerror(errno));
    return 1;
  }
  the_fleet = &f;
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGPIPE, SIG_IGN);
  pthread_t *threads = calloc((size_t)f.threads, sizeof *threads);
  ticker *tickers = calloc((size_t)f.threads, sizeof *tickers);
  if (threads == NULL || tickers == NULL) return 1;
  for (int i = 0; i < f.threads; i++) {
    tickers[i] = (ticker){&f, i};
    pthread_create(&threads[i], NULL, tick_main, &tickers[i]);
  }
  int failed = 0;
  for (int i = 0; i < f.workers; i++) failed += join_one(&f) != 0;
  printf("{\"ready\":%d,\"failed\":%d}\n", f.workers - failed, failed);
  fflush(stdout);
  run(&f);
  atomic_store(&f.stop, 1);
  for (int i = 0; i < f.threads; i++) pthread_join(threads[i], NULL);
  for (size_t i = 0; i < f.n_slots; i++) { /* every agent deregisters (revokes its lease) */
    kolo_fleet_agent_destroy(f.slots[i]->agent);
    free(f.slots[i]);
  }
  free(f.slots);
  free(threads);
  free(tickers);
  if (f.events) fclose(f.events);
  pthread_mutex_destroy(&f.lock);
  printf("{\"done\":1}\n");
  return 0;
}
