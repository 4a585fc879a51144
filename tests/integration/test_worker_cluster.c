/* Implementation of test_worker_cluster.h. */
#define _GNU_SOURCE
#include "test_worker_cluster.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coordination/etcd.h"
#include "coordination/keys.h"
#include "tests/support/ports.h"

int64_t cluster_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static pid_t spawn(const char *log_path, char *const argv[]) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    FILE *log = fopen(log_path, "a");
    if (log) {
      dup2(fileno(log), 1);
      dup2(fileno(log), 2);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

typedef struct buffer {
  char *data;
  size_t length;
} buffer;

static size_t collect(char *data, size_t size, size_t n, void *user) {
  buffer *b = user;
  char *grown = realloc(b->data, b->length + size * n + 1);
  if (grown == NULL) return 0;
  b->data = grown;
  memcpy(b->data + b->length, data, size * n);
  b->length += size * n;
  b->data[b->length] = '\0';
  return size * n;
}

/* One HTTP request; returns the parsed JSON body of a 2xx answer, else NULL. */
static json_t *http(int port, const char *method, const char *path, const char *body) {
  CURL *curl = curl_easy_init();
  if (curl == NULL) return NULL;
  char url[256];
  snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
  buffer b = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url);
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
  struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (body) curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  long code = 0;
  json_t *out = NULL;
  int64_t started = cluster_now_ms();
  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200 && code < 300 && b.data) out = json_loads(b.data, 0, NULL);
    if (code >= 300)
      fprintf(stderr, "HTTP %s %s: %ld %s\n", method, path, code, b.data ? b.data : "");
  } else if (rc != CURLE_COULDNT_CONNECT) { /* a killed server refuses: the tests expect that */
    fprintf(stderr, "HTTP %s %s on port %d: %s after %lld ms\n", method, path, port,
            curl_easy_strerror(rc), (long long)(cluster_now_ms() - started));
  }
  free(b.data);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return out;
}

static int read_port_file(const char *path, int *http_port) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char line[128];
  int found = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "http_port=%d", http_port) == 1) found = 0;
  fclose(f);
  return found;
}

int cluster_start(cluster *c, int n_servers) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < CLUSTER_MAX_SERVERS; i++) c->servers[i] = -1;
  for (int i = 0; i < CLUSTER_MAX_WORKERS; i++) c->workers[i] = c->port_fds[i] = -1;
  snprintf(c->dir, sizeof c->dir, "/tmp/kolo-wt-XXXXXX");
  if (mkdtemp(c->dir) == NULL) return -1;
  if (kolo_etcd_harness_start(NULL, &c->etcd) != KOLO_OK) return -1;
  for (int i = 0; i < n_servers; i++) {
    char program[512], port_file[256], log[256], name[32];
    snprintf(program, sizeof program, "%s/kolo-server", getenv("KOLO_BIN_DIR"));
    snprintf(port_file, sizeof port_file, "%s/server%d.ports", c->dir, i);
    snprintf(log, sizeof log, "%s/server%d.log", c->dir, i);
    snprintf(name, sizeof name, "server%d", i);
    char *argv[] = {program,
                    "--etcd",
                    (char *)kolo_etcd_harness_url(c->etcd),
                    "--grpc-listen",
                    "127.0.0.1:0",
                    "--http-listen",
                    "127.0.0.1:0",
                    "--port-file",
                    port_file,
                    "--leader-ttl",
                    CLUSTER_TTL_S,
                    "--name",
                    name,
                    "--grace-ms",
                    "200",
                    NULL};
    c->servers[i] = spawn(log, argv);
    int64_t deadline = cluster_now_ms() + 20000;
    while (read_port_file(port_file, &c->http_ports[i]) != 0) {
      if (cluster_now_ms() > deadline) return -1;
      sleep_ms(50);
    }
    /* the first replica leads before the next one campaigns */
    deadline = cluster_now_ms() + 10000;
    for (;;) {
      json_t *ready = http(c->http_ports[i], "GET", "/readyz", NULL);
      int leads = json_is_true(json_object_get(ready, "is_leader"));
      json_decref(ready);
      if (ready != NULL && (i > 0 || leads)) break;
      if (cluster_now_ms() > deadline) return -1;
      sleep_ms(100);
    }
  }
  return 0;
}

static int worker_registered(cluster *c, const char *id) {
  for (int i = 0; i < CLUSTER_MAX_SERVERS; i++) {
    if (c->servers[i] < 0) continue;
    json_t *workers = http(c->http_ports[i], "GET", "/v1/workers", NULL);
    if (workers == NULL) continue;
    int found = 0;
    size_t k;
    json_t *w;
    json_array_foreach(json_object_get(workers, "workers"), k, w) {
      if (strcmp(json_string_value(json_object_get(w, "id")) ?: "", id) == 0) found = 1;
    }
    json_decref(workers);
    return found;
  }
  return 0;
}

int cluster_start_worker(cluster *c, int index) {
  char program[512], id[16], advertise[64], work_dir[256], log[256];
  snprintf(program, sizeof program, "%s/kolo-worker", getenv("KOLO_BIN_DIR"));
  snprintf(id, sizeof id, "w%d", index);
  if (c->port_fds[index] >= 0) close(c->port_fds[index]); /* a restarted worker: a new port */
  int port = kolo_test_hold_port(&c->port_fds[index]);
  if (port < 0) return -1;
  c->ports[index] = port;
  snprintf(advertise, sizeof advertise, "127.0.0.1:%d", port);
  snprintf(work_dir, sizeof work_dir, "%s/%s", c->dir, id);
  snprintf(log, sizeof log, "%s/%s.log", c->dir, id);
  char *argv[] = {program,
                  "--etcd",
                  (char *)kolo_etcd_harness_url(c->etcd),
                  "--advertise",
                  advertise,
                  "--id",
                  id,
                  "--lease-ttl",
                  CLUSTER_TTL_S,
                  "--work-dir",
                  work_dir,
                  "--stop-grace-ms",
                  "500",
                  NULL};
  c->workers[index] = spawn(log, argv);
  int64_t deadline = cluster_now_ms() + 15000;
  while (!worker_registered(c, id)) {
    if (cluster_now_ms() > deadline) {
      char why[64];
      snprintf(why, sizeof why, "worker %s not registered within 15000 ms", id);
      cluster_dump(c, NULL, why);
      return -1;
    }
    sleep_ms(100);
  }
  return 0;
}

int cluster_worker_port(cluster *c, int index) {
  return c->ports[index];
}

void cluster_release_port(cluster *c, int index) {
  if (c->port_fds[index] >= 0) close(c->port_fds[index]);
  c->port_fds[index] = -1;
}

void cluster_signal_worker(cluster *c, int index, int sig) {
  if (c->workers[index] <= 0) return;
  kill(c->workers[index], sig);
  if (sig == SIGKILL) {
    waitpid(c->workers[index], NULL, 0);
    c->workers[index] = -1;
  }
}

int cluster_wait_worker(cluster *c, int index, int timeout_ms) {
  int64_t deadline = cluster_now_ms() + timeout_ms;
  while (c->workers[index] > 0) {
    int status;
    if (waitpid(c->workers[index], &status, WNOHANG) == c->workers[index]) {
      c->workers[index] = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (cluster_now_ms() > deadline) {
      char why[64];
      snprintf(why, sizeof why, "worker w%d did not exit within %d ms", index, timeout_ms);
      cluster_dump(c, NULL, why);
      return -1;
    }
    sleep_ms(50);
  }
  return -1;
}

void cluster_kill_server(cluster *c, int index) {
  if (c->servers[index] <= 0) return;
  kill(c->servers[index], SIGKILL);
  waitpid(c->servers[index], NULL, 0);
  c->servers[index] = -1;
}

int cluster_submit(cluster *c, const char *id, int min_workers, int max_workers, int steps,
                   int delay_ms, const char *extra) {
  return cluster_submit_env(c, id, min_workers, max_workers, steps, delay_ms, extra, "");
}

int cluster_submit_env(cluster *c, const char *id, int min_workers, int max_workers, int steps,
                       int delay_ms, const char *extra, const char *env) {
  char body[2048];
  snprintf(body, sizeof body,
           "{\"id\":\"%s\",\"name\":\"elastic-loop\",\"min_workers\":%d,\"max_workers\":%d%s%s,"
           "\"exec\":{\"argv\":[\"%s/elastic_loop\",\"%d\",\"1000\",\"5\",\"%d\"],"
           "\"env\":{\"KOLO_RESULT_FILE\":\"%s/%s.result\"%s%s}}}",
           id, min_workers, max_workers, extra && extra[0] ? "," : "", extra ? extra : "",
           getenv("KOLO_TEST_DIR"), steps, delay_ms, c->dir, id, env && env[0] ? "," : "",
           env ? env : "");
  for (int i = 0; i < CLUSTER_MAX_SERVERS; i++) {
    if (c->servers[i] < 0) continue;
    json_t *job = http(c->http_ports[i], "POST", "/v1/jobs", body);
    int ok = job != NULL;
    json_decref(job);
    return ok ? 0 : -1;
  }
  return -1;
}

json_t *cluster_post(cluster *c, const char *path, const char *body) {
  for (int i = 0; i < CLUSTER_MAX_SERVERS; i++)
    if (c->servers[i] > 0) return http(c->http_ports[i], "POST", path, body);
  return NULL;
}

const char *cluster_worker_state(cluster *c, const char *id, char *buf, size_t len) {
  buf[0] = '\0';
  for (int i = 0; i < CLUSTER_MAX_SERVERS; i++) {
    if (c->servers[i] <= 0) continue;
    json_t *workers = http(c->http_ports[i], "GET", "/v1/workers", NULL);
    size_t k;
    json_t *w;
    json_array_foreach(json_object_get(workers, "workers"), k, w) {
      if (strcmp(json_string_value(json_object_get(w, "id")) ?: "", id) != 0) continue;
      snprintf(buf, len, "%s", json_string_value(json_object_get(w, "state")) ?: "");
      for (char *p = buf; *p; p++) /* the API says IDLE/BUSY/DRAINING; callers compare lower case */
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    }
    json_decref(workers);
    break;
  }
  return buf;
}

json_t *cluster_job(cluster *c, const char *id) {
  char path[256];
  snprintf(path, sizeof path, "/v1/jobs/%s", id);
  for (int i = 0; i < CLUSTER_MAX_SERVERS; i++) {
    if (c->servers[i] < 0) continue;
    json_t *job = http(c->http_ports[i], "GET", path, NULL);
    if (job) return job;
  }
  return NULL;
}

static int final_phase(const char *phase) {
  return strcmp(phase, "SUCCEEDED") == 0 || strcmp(phase, "FAILED") == 0 ||
         strcmp(phase, "CANCELLED") == 0;
}

json_t *cluster_wait_phase(cluster *c, const char *id, const char *phase, int min_epoch,
                           int timeout_ms) {
  int64_t deadline = cluster_now_ms() + timeout_ms;
  json_t *job = NULL;
  for (;;) {
    json_decref(job);
    job = cluster_job(c, id);
    json_t *status = json_object_get(job, "status");
    const char *now = json_string_value(json_object_get(status, "phase")) ?: "";
    if (strcmp(now, phase) == 0 &&
        json_integer_value(json_object_get(status, "epoch")) >= min_epoch)
      return job;
    if (final_phase(now) || cluster_now_ms() > deadline) {
      char why[256];
      snprintf(why, sizeof why, "job %s: wanted %s (epoch >= %d) within %d ms, is %s: %s", id,
               phase, min_epoch, timeout_ms, now,
               json_string_value(json_object_get(status, "error")) ?: "");
      cluster_dump(c, id, why);
      return job;
    }
    sleep_ms(50);
  }
}

int cluster_wait_step(cluster *c, const char *id, int step, int timeout_ms) {
  int64_t deadline = cluster_now_ms() + timeout_ms;
  json_int_t now = -1;
  int polls = 0, answered = 0;
  while (cluster_now_ms() < deadline) {
    json_t *job = cluster_job(c, id);
    polls++;
    answered += job != NULL;
    now = json_integer_value(
        json_object_get(json_object_get(json_object_get(job, "status"), "progress"), "step"));
    json_decref(job);
    if (now >= step) return 0;
    sleep_ms(50);
  }
  char why[200];
  snprintf(why, sizeof why,
           "job %s: rank 0 did not reach step %d within %d ms (last step %lld; %d of %d polls "
           "answered)",
           id, step, timeout_ms, (long long)now, answered, polls);
  cluster_dump(c, id, why);
  return -1;
}

json_t *cluster_report(cluster *c, const char *job, const char *worker) {
  const char *endpoints[] = {kolo_etcd_harness_url(c->etcd)};
  kolo_etcd_config config = {.endpoints = endpoints, .endpoint_count = 1};
  kolo_etcd *etcd = NULL;
  char key[512];
  if (kolo_keys_report(job, worker, key, sizeof key) != KOLO_OK) return NULL;
  if (kolo_etcd_create(&config, &etcd) != KOLO_OK) return NULL;
  kolo_etcd_kv kv = {0};
  json_t *report = NULL;
  if (kolo_etcd_get(etcd, kolo_etcd_str(key), &kv, NULL) == KOLO_OK)
    report = json_loadb((const char *)kv.value, kv.value_len, 0, NULL);
  kolo_etcd_kv_clear(&kv);
  kolo_etcd_destroy(etcd);
  return report;
}

void cluster_print_job(json_t *job) {
  json_t *status = json_object_get(job, "status");
  fprintf(stderr, "job %s: %s epoch %lld, %zu members, error '%s'\n",
          json_string_value(json_object_get(job, "id")) ?: "?",
          json_string_value(json_object_get(status, "phase")) ?: "?",
          (long long)json_integer_value(json_object_get(status, "epoch")),
          json_array_size(json_object_get(status, "members")),
          json_string_value(json_object_get(status, "error")) ?: "");
  size_t k;
  json_t *event;
  json_array_foreach(json_object_get(job, "events"), k, event) {
    fprintf(stderr, "  %lld %s (epoch %lld): %s\n",
            (long long)json_integer_value(json_object_get(event, "time_unix_ms")),
            json_string_value(json_object_get(event, "type")) ?: "?",
            (long long)json_integer_value(json_object_get(event, "epoch")),
            json_string_value(json_object_get(event, "message")) ?: "");
  }
}

/* The last max_bytes of the file at path, to stderr. */
static void print_tail(const char *path, long max_bytes) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  long from = size > max_bytes ? size - max_bytes : 0;
  fseek(f, from, SEEK_SET);
  fprintf(stderr, "---- %s (%ld bytes%s) ----\n", path, size, from > 0 ? ", its tail" : "");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stderr);
  fclose(f);
}

/* Every regular file in dir whose name ends in suffix, in name order. */
static void print_tails(const char *dir, const char *suffix, long max_bytes) {
  struct dirent **names = NULL;
  int n = scandir(dir, &names, NULL, alphasort);
  for (int i = 0; i < n; i++) {
    const char *name = names[i]->d_name;
    size_t len = strlen(name), slen = strlen(suffix);
    if (len > slen && strcmp(name + len - slen, suffix) == 0) {
      char path[512];
      snprintf(path, sizeof path, "%s/%s", dir, name);
      print_tail(path, max_bytes);
    }
    free(names[i]);
  }
  free(names);
}

void cluster_dump(cluster *c, const char *id, const char *why) {
  fprintf(stderr, "==== cluster %s: %s (at %lld ms)\n", c->dir, why, (long long)cluster_now_ms());
  if (id) {
    json_t *job = cluster_job(c, id);
    if (job) {
      json_t *progress = json_object_get(json_object_get(job, "status"), "progress");
      char *text = progress ? json_dumps(progress, JSON_COMPACT) : NULL;
      fprintf(stderr, "progress %s\n", text ? text : "(none)");
      free(text);
      cluster_print_job(job);
    } else {
      fprintf(stderr, "job %s: no answer from any server\n", id);
    }
    json_decref(job);
  }
  print_tails(c->dir, ".log", 6000); /* server<i>.log, w<i>.log */
  if (id) {
    for (int i = 0; i < CLUSTER_MAX_WORKERS; i++) {
      char logs[384];
      snprintf(logs, sizeof logs, "%s/w%d/logs/%s", c->dir, i, id);
      print_tails(logs, ".log", 2000); /* the job's processes, one file per epoch and rank */
    }
  }
  fprintf(stderr, "==== end of cluster dump\n");
  c->keep = 1;
}

json_t *cluster_event(json_t *job, const char *type, int min_epoch) {
  size_t k;
  json_t *event;
  json_array_foreach(json_object_get(job, "events"), k, event) {
    if (strcmp(json_string_value(json_object_get(event, "type")) ?: "", type) == 0 &&
        json_integer_value(json_object_get(event, "epoch")) >= min_epoch)
      return event;
  }
  return NULL;
}

int cluster_results(cluster *c, const char *id, int steps) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s.result", c->dir, id);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[256];
  int n = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    long long got = -1;
    char verdict[16] = "";
    double sum;
    int reconfigurations;
    if (sscanf(line, "RESULT %lld %lf %d %15s", &got, &sum, &reconfigurations, verdict) != 4 ||
        got != steps || strcmp(verdict, "exact") != 0) {
      fprintf(stderr, "bad result line: %s", line);
      bad = 1;
    }
    n++;
  }
  fclose(f);
  return bad ? -1 : n;
}

static int scan_processes(cluster *c, const char *job, const char *worker, pid_t *first);

int cluster_job_processes(cluster *c, const char *job, const char *worker) {
  return scan_processes(c, job, worker, NULL);
}

pid_t cluster_job_pid(cluster *c, const char *job, const char *worker) {
  pid_t pid = -1;
  return scan_processes(c, job, worker, &pid) > 0 ? pid : -1;
}

/* Whether the process's environment (read whole, entry by entry) has all n entries. */
static int environ_has(const char *pid, char *const *want, int n) {
  char path[300];
  snprintf(path, sizeof path, "/proc/%s/environ", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  int found = 0, seen[4] = {0};
  char *entry = NULL;
  size_t cap = 0;
  while (found < n && getdelim(&entry, &cap, '\0', f) > 0) {
    for (int i = 0; i < n; i++) {
      if (!seen[i] && strcmp(entry, want[i]) == 0) {
        seen[i] = 1;
        found++;
      }
    }
  }
  free(entry);
  fclose(f);
  return found == n;
}

/* Processes of THIS cluster only: the machine may run other clusters' jobs
 * with the same job and worker ids at the same time (another test program
 * beside this one, another checkout's tests), so a process also has to name
 * this cluster's agent socket (<dir>/<worker>/agent.sock, set by the agent). */
static int scan_processes(cluster *c, const char *job, const char *worker, pid_t *first) {
  char want_job[160], want_worker[160], want_socket[400];
  snprintf(want_job, sizeof want_job, "KOLO_JOB_ID=%s", job);
  snprintf(want_worker, sizeof want_worker, "KOLO_WORKER_ID=%s", worker);
  snprintf(want_socket, sizeof want_socket, "KOLO_AGENT_SOCKET=%s/%s/agent.sock", c->dir, worker);
  char *const want[] = {want_job, want_worker, want_socket};
  DIR *proc = opendir("/proc");
  if (proc == NULL) return -1;
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(proc)) != NULL) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    /* a zombie has no environment left to read; so one that matches runs */
    if (!environ_has(entry->d_name, want, 3)) continue;
    if (first && count == 0) *first = (pid_t)atoi(entry->d_name);
    count++;
  }
  closedir(proc);
  return count;
}

int cluster_wait_no_processes(cluster *c, const char *job, const char *worker, int timeout_ms) {
  int64_t deadline = cluster_now_ms() + timeout_ms;
  while (cluster_job_processes(c, job, worker) != 0) {
    if (cluster_now_ms() > deadline) return -1;
    sleep_ms(50);
  }
  return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void cluster_stop(cluster *c) {
  for (int i = 0; i < CLUSTER_MAX_WORKERS; i++) {
    if (c->workers[i] > 0) {
      kill(c->workers[i], SIGKILL);
      waitpid(c->workers[i], NULL, 0);
      c->workers[i] = -1;
    }
  }
  for (int i = 0; i < CLUSTER_MAX_WORKERS; i++) {
    if (c->port_fds[i] >= 0) close(c->port_fds[i]);
    c->port_fds[i] = -1;
  }
  for (int i = 0; i < CLUSTER_MAX_SERVERS; i++) cluster_kill_server(c, i);
  kolo_etcd_harness_destroy(c->etcd);
  c->etcd = NULL;
  if (c->dir[0] && (c->keep || getenv("KOLO_KEEP") != NULL))
    fprintf(stderr, "cluster files kept in %s\n", c->dir);
  else if (c->dir[0])
    nftw(c->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
