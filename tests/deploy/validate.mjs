// Validates the output of `helm template` for the kolo chart, offline: every object against
// Kubernetes' own schemas (npm kubernetes-models, by apiVersion/kind; the Prometheus
// Operator's and KEDA's CRDs from their @kubernetes-models packages), with no field unknown to
// its type (from the packages' type declarations), then kolo's wiring: every pod finds etcd,
// the coordinators and workers get the token, probes hit the right routes and ports, GPUs
// are requested only when asked, the worker preStop drains this very worker, the network
// policies let through only what kolo needs, the monitors and autoscalers point at the
// right objects, and every flag the chart passes to kolo-server, kolo-worker, kolo and etcd
// is one the real binary lists in its --help (the expectations here are this file's own,
// never read from the chart, so a renamed flag fails until the binary has it).
//
// Usage: node validate.mjs --node-dir DIR --manifests FILE [expectations...]
//   --node-dir DIR            directory whose node_modules holds kubernetes-models and yaml
//   --bin-dir DIR             kolo's built programs (kolo-server, kolo-worker, kolo); etcd
//                             and etcdctl come from PATH
//   --namespace NS            the namespace rendered into (default "default")
//   --etcd internal:N | external:URL[,URL...]
//   --gpus N                  GPUs per worker (0: no GPU request anywhere)
//   --autoscaling off|hpa|keda
//   --tls on|off
//   --etcd-tls on|off         client (and peer) TLS to etcd
//   --etcd-tls-server NAME, --etcd-tls-client NAME   its Secrets (made outside the chart)
//   --hpa-metric custom       the HPA scales on metrics given in values, not the demand
//   --etcd-auth on|off        etcd user/password
//   --network-policy on|off
//   --monitoring on|off       ServiceMonitor and PodMonitor
//   --token VALUE             the token the chart's Secret must hold
//   --existing-secrets AUTH[,TLS]   secrets the chart must use without creating them
// Prints one line per failed check and exits 1 when any failed.
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

function parseArgs(argv) {
  const opts = {
    namespace: "default", gpus: 0, autoscaling: "off", tls: "off", etcd: "internal:1", etcdTls: "off",
    etcdAuth: "off", networkPolicy: "on", monitoring: "off", etcdTlsServer: "", etcdTlsClient: "",
  };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (argv[i + 1] === undefined) throw new Error(`missing value after ${argv[i]}`);
    opts[key] = argv[i + 1];
  }
  if (!opts.nodeDir || !opts.manifests || !opts.binDir) throw new Error("--node-dir, --bin-dir and --manifests are required");
  opts.gpus = Number(opts.gpus);
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const require = createRequire(path.join(path.resolve(opts.nodeDir), "validate.cjs"));
const YAML = require("yaml");

// What the programs are called and take (kolo's own names; checked against --help below).
const BIN = { server: "kolo-server", worker: "kolo-worker", cli: "kolo", etcd: "etcd" };
const ROUTES = { healthz: "/healthz", readyz: "/readyz", metrics: "/metrics", demand: "/v1/demand" };

const failures = [];
let checks = 0;
/** Records one check; a false condition becomes a reported failure. */
function check(cond, message) {
  checks += 1;
  if (!cond) failures.push(message);
  return Boolean(cond);
}

// ---- load -------------------------------------------------------------------------
const docs = YAML.parseAllDocuments(readFileSync(opts.manifests, "utf8"));
const objects = [];
for (const doc of docs) {
  check(doc.errors.length === 0, `YAML error: ${doc.errors.map((e) => e.message).join("; ")}`);
  const obj = doc.toJS();
  if (obj !== null && obj !== undefined) objects.push(obj);
}
check(objects.length > 0, "no objects rendered");

const byKind = (kind) => objects.filter((o) => o.kind === kind);
const find = (kind, name) => objects.find((o) => o.kind === kind && o.metadata?.name === name);
const label = (o) => `${o.kind}/${o.metadata?.name}`;

// ---- 1. Kubernetes schemas ------------------------------------------------------------
const CRD_PACKAGES = { "monitoring.coreos.com": "@kubernetes-models/prometheus-operator", "keda.sh": "@kubernetes-models/keda" };

/** The package directory and module path of an apiVersion: kubernetes-models or a CRD package. */
function modelHome(apiVersion) {
  const group = apiVersion.includes("/") ? apiVersion.split("/")[0] : "";
  const pkg = CRD_PACKAGES[group] ?? "kubernetes-models";
  return { pkg, dir: path.dirname(require.resolve(`${pkg}/package.json`)) };
}

/** The model class for an apiVersion and kind, or null. */
function modelClass(apiVersion, kind) {
  try {
    return require(`${modelHome(apiVersion).pkg}/${apiVersion}`)[kind] ?? null;
  } catch {
    return null;
  }
}

const seen = new Set();
for (const o of objects) {
  const Model = modelClass(o.apiVersion, o.kind);
  if (!check(Model, `${label(o)}: no Kubernetes schema for ${o.apiVersion} ${o.kind}`)) continue;
  try {
    new Model(o).validate();
    check(true, "");
  } catch (err) {
    check(false, `${label(o)}: invalid ${o.apiVersion} ${o.kind}: ${err.message}`);
  }
  const key = `${o.kind}/${o.metadata?.namespace}/${o.metadata?.name}`;
  check(!seen.has(key), `${key}: rendered twice`);
  seen.add(key);
  check(o.metadata?.namespace === opts.namespace, `${label(o)}: namespace ${o.metadata?.namespace}, want ${opts.namespace}`);
  check((o.metadata?.name ?? "").length <= 63, `${label(o)}: name longer than 63 characters`);
}

// ---- 1b. unknown fields ---------------------------------------------------------------------
// Kubernetes' schemas accept unknown fields (the API server drops them), so validate() does
// not catch a misspelt field name in a template. The packages' type declarations list every
// field of every type, though (named interfaces, and inline object types for CRDs): walk each
// object along them and report keys no type has.
const typeCache = new Map();

/** The top-level "field"?: type; entries of a type body: Map name -> {type, imports, file}. */
function parseFields(body, imports, file) {
  const fields = new Map();
  let field = null;
  let type = "";
  let depth = 0;
  for (const line of body.split("\n")) {
    const m = depth === 0 && line.match(/^\s*"([^"]+)"\??: (.*)$/);
    if (m) {
      field = m[1];
      type = m[2];
    } else if (field) {
      type += ` ${line.trim()}`;
    }
    depth += (line.match(/[{<]/g) ?? []).length - (line.match(/[}>]/g) ?? []).length;
    if (field && depth === 0 && type.trim().endsWith(";")) {
      fields.set(field, { type: type.trim().replace(/;$/, ""), imports, file });
      field = null;
    }
  }
  return fields;
}

/** Fields of the interface a .d.ts file declares first, or null. */
function interfaceFields(file) {
  if (typeCache.has(file)) return typeCache.get(file);
  let result = null;
  if (existsSync(file)) {
    const text = readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
    const head = text.match(/export interface (\w+)(?: extends (\w+))? \{/);
    if (head && (!head[2] || head[2] === "TypeMeta")) {
      const imports = new Map();
      for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) imports.set(m[1], m[2]);
      let depth = 0;
      let i = head.index + head[0].length - 1;
      const start = i + 1;
      for (; i < text.length; i++) {
        if (text[i] === "{") depth++;
        else if (text[i] === "}" && --depth === 0) break;
      }
      result = parseFields(text.slice(start, i).replace(/\{ /g, "{\n").replace(/; /g, ";\n"), imports, file);
    }
  }
  typeCache.set(file, result);
  return result;
}

/** The .d.ts file behind a type name imported into `from`, or null. */
function typeFile(name, imports, from) {
  const spec = imports.get(name);
  if (!spec) return null;
  if (spec.startsWith(".")) return path.resolve(path.dirname(from), `${spec}.d.ts`);
  try {
    return path.join(path.dirname(require.resolve(`${spec.split("/").slice(0, 2).join("/")}/package.json`)),
      `${spec.split("/").slice(2).join("/")}.d.ts`);
  } catch {
    return null;
  }
}

/** Reports keys of `value` that its declared type (text) does not have, recursively. */
function checkFields(value, typeText, imports, from, where) {
  const t = typeText.trim();
  const arr = t.match(/^Array<([\s\S]+)>$/);
  if (arr) {
    if (Array.isArray(value)) value.forEach((v, i) => checkFields(v, arr[1], imports, from, `${where}[${i}]`));
    return;
  }
  const map = t.match(/^\{\s*\[key: string\]: ([\s\S]+?);?\s*\}$/);
  if (map) {
    if (value && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) checkFields(v, map[1], imports, from, `${where}.${k}`);
    }
    return;
  }
  if (!value || typeof value !== "object" || Array.isArray(value)) return;
  let fields = null;
  if (/^\{[\s\S]*"[^"]+"\??:[\s\S]*\}$/.test(t)) {
    // an inline object type (CRDs): its body, one entry per line
    fields = parseFields(t.slice(1, -1).replace(/\{ /g, "{\n").replace(/; /g, ";\n"), imports, from);
  } else if (/^I\w+$/.test(t)) {
    const file = typeFile(t, imports, from);
    fields = file && interfaceFields(file);
  }
  if (!fields) return; // a type alias (Quantity, IntOrString), a union or unknown: nothing to check
  for (const [k, v] of Object.entries(value)) {
    const f = fields.get(k);
    if (!check(f, `${where}: unknown field "${k}"`)) continue;
    checkFields(v, f.type, f.imports, f.file, `${where}.${k}`);
  }
}

for (const o of objects) {
  const file = path.join(modelHome(o.apiVersion ?? "").dir, o.apiVersion ?? "", `${o.kind}.d.ts`);
  const fields = interfaceFields(file);
  if (!check(fields, `${label(o)}: no type declaration for ${o.apiVersion} ${o.kind}`)) continue;
  for (const [k, v] of Object.entries(o)) {
    const f = fields.get(k);
    if (!check(f, `${label(o)}: unknown field "${k}"`)) continue;
    checkFields(v, f.type, f.imports, f.file, `${label(o)}.${k}`);
  }
}

// ---- helpers over pods ------------------------------------------------------------------
/** The pod template of a pod-bearing object (Deployment, StatefulSet, Job, CronJob), or null. */
function podTemplate(o) {
  if (["Deployment", "StatefulSet", "Job"].includes(o.kind)) return o.spec?.template ?? null;
  if (o.kind === "CronJob") return o.spec?.jobTemplate?.spec?.template ?? null;
  return null;
}
const workloads = objects.filter((o) => podTemplate(o));
const component = (o) => o.metadata?.labels?.["app.kubernetes.io/component"];
const workload = (comp) => workloads.find((o) => component(o) === comp);
const matches = (selector, labels) =>
  selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);
/** A LabelSelector (matchLabels and matchExpressions) against labels; an empty one matches all. */
function selects(sel, labels) {
  if (!sel) return false;
  const okLabels = Object.entries(sel.matchLabels ?? {}).every(([k, v]) => labels?.[k] === v);
  const okExpr = (sel.matchExpressions ?? []).every((e) => {
    const has = labels && e.key in labels;
    if (e.operator === "In") return has && e.values.includes(labels[e.key]);
    if (e.operator === "NotIn") return !has || !e.values.includes(labels[e.key]);
    if (e.operator === "Exists") return has;
    if (e.operator === "DoesNotExist") return !has;
    return false;
  });
  return okLabels && okExpr;
}

/** Expands $(VAR) the way the kubelet does in args, from env and envFrom ConfigMaps. */
function envOf(container) {
  const env = {};
  for (const from of container.envFrom ?? []) {
    if (from.configMapRef) {
      const cm = find("ConfigMap", from.configMapRef.name);
      check(cm, `container ${container.name}: envFrom ConfigMap ${from.configMapRef.name} is not rendered`);
      Object.assign(env, cm?.data ?? {});
    }
  }
  for (const e of container.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef) env[e.name] = `<field:${e.valueFrom.fieldRef.fieldPath}>`;
    else env[e.name] = "<from>";
  }
  return env;
}
const expand = (s, env) => String(s).replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, v) => (v in env ? env[v] : m));

/** The value after a flag in a container's args (also --flag=value), expanded. */
function flagValue(container, flag) {
  const args = container.args ?? [];
  const env = envOf(container);
  for (let i = 0; i < args.length; i++) {
    if (args[i] === flag) return expand(args[i + 1], env);
    if (String(args[i]).startsWith(`${flag}=`)) return expand(args[i].slice(flag.length + 1), env);
  }
  return undefined;
}
const hasFlag = (container, flag) => (container.args ?? []).some((a) => a === flag || String(a).startsWith(`${flag}=`));

/** Which Secret key a file path inside a container comes from: {secret, key} or null. */
function secretFileSource(podSpec, container, file) {
  for (const m of container.volumeMounts ?? []) {
    const prefix = m.mountPath.replace(/\/$/, "") + "/";
    if (!file.startsWith(prefix)) continue;
    const vol = (podSpec.volumes ?? []).find((v) => v.name === m.name);
    if (!vol?.secret) return null;
    const rel = file.slice(prefix.length);
    const item = (vol.secret.items ?? []).find((it) => it.path === rel);
    return { secret: vol.secret.secretName, key: item ? item.key : rel };
  }
  return null;
}

/** The container port number a probe, Service or policy targets (a number or a port name). */
function resolvePort(container, port) {
  if (typeof port === "number") return port;
  return (container.ports ?? []).find((p) => p.name === port)?.containerPort;
}

const existing = (opts.existingSecrets ?? "").split(",").filter(Boolean);
const authSecret = (name) => {
  if (existing.includes(name)) return { name, data: null };
  return find("Secret", name) ?? null;
};

// ---- 2. the flags each program gets exist in that program ------------------------------------
const helpCache = new Map();
/** The --help text of a program (kolo's from --bin-dir, etcd's from PATH). */
function helpOf(program) {
  if (helpCache.has(program)) return helpCache.get(program);
  const exe = ["kolo-server", "kolo-worker", "kolo"].includes(program) ? path.join(opts.binDir, program) : program;
  let text = "";
  try {
    text = execFileSync(exe, ["--help"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 10000 });
  } catch (err) {
    text = `${err.stdout ?? ""}${err.stderr ?? ""}`; // some print usage to stderr
  }
  check(text.length > 0, `${program} --help printed nothing (is it built / installed?)`);
  helpCache.set(program, text);
  return text;
}
/** Every --flag in args must appear in the program's --help. */
function checkFlagsKnown(who, program, args) {
  const help = helpOf(program);
  for (const a of args) {
    const m = String(a).match(/^(--[A-Za-z0-9][A-Za-z0-9-]*)/);
    if (!m) continue;
    const known = new RegExp(`(^|[\\s,\\[])${m[1].replace(/[-]/g, "\\-")}([\\s=,\\]'"]|$)`, "m").test(help);
    check(known, `${who}: ${program} has no flag ${m[1]} (not in its --help)`);
  }
}

// ---- 3. generic wiring of every workload ---------------------------------------------
for (const w of workloads) {
  const tpl = podTemplate(w);
  const spec = tpl.spec;
  if (w.spec.selector) check(matches(w.spec.selector?.matchLabels, tpl.metadata?.labels), `${label(w)}: selector does not match its pod labels`);
  if (w.kind === "StatefulSet") {
    const svc = find("Service", w.spec.serviceName);
    check(svc && svc.spec.clusterIP === "None", `${label(w)}: serviceName ${w.spec.serviceName} is not a headless Service`);
  }
  check(spec.securityContext?.runAsNonRoot === true, `${label(w)}: pod not runAsNonRoot`);
  check(spec.securityContext?.runAsUser > 0, `${label(w)}: pod runAsUser must be a non-zero uid`);
  check(spec.securityContext?.seccompProfile?.type === "RuntimeDefault", `${label(w)}: no RuntimeDefault seccomp profile`);
  check(spec.automountServiceAccountToken === false, `${label(w)}: mounts a Kubernetes API token it does not need`);
  const sa = spec.serviceAccountName;
  check(sa && find("ServiceAccount", sa), `${label(w)}: ServiceAccount ${sa} is not rendered`);
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  const claims = new Set((w.spec.volumeClaimTemplates ?? []).map((c) => c.metadata.name));
  for (const v of volumes.values()) {
    const external = [opts.etcdTlsClient, opts.etcdTlsServer].includes(v.secret?.secretName);
    if (v.secret && !external) check(authSecret(v.secret.secretName), `${label(w)}: volume ${v.name} uses Secret ${v.secret.secretName}, which is not rendered`);
    if (v.configMap) check(find("ConfigMap", v.configMap.name), `${label(w)}: volume ${v.name} uses a ConfigMap that is not rendered`);
  }
  for (const c of spec.containers) {
    const sc = c.securityContext ?? {};
    check(sc.allowPrivilegeEscalation === false, `${label(w)}/${c.name}: allowPrivilegeEscalation is not false`);
    check(sc.readOnlyRootFilesystem === true, `${label(w)}/${c.name}: root file system is writable`);
    check((sc.capabilities?.drop ?? []).includes("ALL"), `${label(w)}/${c.name}: capabilities not dropped`);
    for (const m of c.volumeMounts ?? []) {
      check(volumes.has(m.name) || claims.has(m.name), `${label(w)}/${c.name}: mount ${m.name} has no volume`);
    }
    check((c.volumeMounts ?? []).some((m) => m.mountPath === "/tmp"), `${label(w)}/${c.name}: no writable /tmp`);
    for (const ref of Object.values(envOf(c))) check(!/\$\(/.test(ref), `${label(w)}/${c.name}: env value ${ref} is not expanded`);
    for (const a of c.args ?? []) {
      const left = expand(a, envOf(c)).match(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/);
      check(!left, `${label(w)}/${c.name}: argument ${a} refers to $(${left?.[1]}), which the container does not define`);
    }
    const program = c.command?.[0];
    if ([BIN.server, BIN.worker, BIN.etcd].includes(program)) checkFlagsKnown(`${label(w)}/${c.name}`, program, c.args ?? []);
  }
}

// Every Service selects some pods and targets ports those pods declare.
for (const svc of byKind("Service")) {
  const targets = workloads.filter((w) => matches(svc.spec.selector, podTemplate(w).metadata.labels));
  if (!check(targets.length === 1, `${label(svc)}: selects ${targets.length} workloads, want 1`)) continue;
  const c = podTemplate(targets[0]).spec.containers[0];
  for (const p of svc.spec.ports) {
    check(resolvePort(c, p.targetPort ?? p.port) !== undefined, `${label(svc)}: port ${p.name} targets ${p.targetPort}, which ${label(targets[0])} does not declare`);
  }
}

// Every PodDisruptionBudget covers a workload and leaves room to evict someone.
for (const pdb of byKind("PodDisruptionBudget")) {
  const targets = workloads.filter((w) => matches(pdb.spec.selector?.matchLabels, podTemplate(w).metadata.labels));
  if (!check(targets.length === 1, `${label(pdb)}: selects ${targets.length} workloads, want 1`)) continue;
  const replicas = targets[0].spec.replicas;
  if (pdb.spec.minAvailable !== undefined && replicas !== undefined) {
    check(pdb.spec.minAvailable < replicas, `${label(pdb)}: minAvailable ${pdb.spec.minAvailable} blocks every eviction of ${replicas} replicas`);
  }
}

// ---- 4. etcd ----------------------------------------------------------------------------
const coordinator = workload("coordinator");
const worker = workload("worker");
const etcd = workload("etcd");
check(coordinator?.kind === "Deployment", "no coordinator Deployment");
check(worker?.kind === "StatefulSet", "no worker StatefulSet");
const etcdScheme = opts.etcdTls === "on" ? "https" : "http";

/** Bytes of a quantity (8Gi, 500M, 1073741824). */
function bytes(q) {
  const m = String(q).match(/^([0-9.]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$/);
  const unit = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, k: 1e3, M: 1e6, G: 1e9, T: 1e12 }[m?.[2]] ?? 1;
  return m ? Number(m[1]) * unit : NaN;
}

const [etcdMode, etcdArg] = opts.etcd.split(/:(.*)/s);
if (etcdMode === "internal") {
  const n = Number(etcdArg);
  if (check(etcd?.kind === "StatefulSet", "no etcd StatefulSet although the chart should run etcd")) {
    check(etcd.spec.replicas === n, `etcd has ${etcd.spec.replicas} members, want ${n}`);
    const c = etcd.spec.template.spec.containers[0];
    check(c.command?.[0] === BIN.etcd, `etcd runs ${c.command?.[0]}, not ${BIN.etcd}`);
    check(c.image !== coordinator?.spec.template.spec.containers[0].image,
      `etcd runs kolo's image ${c.image}: a kolo upgrade would restart etcd under running jobs`);
    const cluster = (flagValue(c, "--initial-cluster") ?? "").split(",").filter(Boolean);
    check(cluster.length === n, `etcd --initial-cluster lists ${cluster.length} members, want ${n}`);
    cluster.forEach((m, i) => {
      const want = `${etcd.metadata.name}-${i}=${etcdScheme}://${etcd.metadata.name}-${i}.${etcd.spec.serviceName}.${opts.namespace}.svc.`;
      check(m.startsWith(want), `etcd member ${i} is ${m}, want ${want}...`);
    });
    const peerSvc = find("Service", etcd.spec.serviceName);
    check(peerSvc?.spec.publishNotReadyAddresses === true, "etcd peers cannot resolve each other before they are ready");
    const claim = (etcd.spec.volumeClaimTemplates ?? [])[0];
    check(claim, "etcd members have no persistent volume");
    // history is compacted and bounded, inside the volume
    check(flagValue(c, "--auto-compaction-mode") && flagValue(c, "--auto-compaction-retention"), "etcd has no auto-compaction (its history grows into the quota)");
    const quota = Number(flagValue(c, "--quota-backend-bytes"));
    check(quota > 0, "etcd has no --quota-backend-bytes");
    if (claim) check(quota <= bytes(claim.spec.resources.requests.storage), `etcd's quota ${quota} does not fit its volume ${claim.spec.resources.requests.storage}`);
    // probes on the plain metrics listener (a kubelet has no client certificate)
    const metricsUrl = flagValue(c, "--listen-metrics-urls") ?? "";
    check(metricsUrl.startsWith("http://"), `etcd's metrics listener ${metricsUrl} is not plain HTTP`);
    for (const probe of ["readinessProbe", "livenessProbe"]) {
      const port = resolvePort(c, c[probe]?.httpGet?.port ?? c[probe]?.tcpSocket?.port);
      check(port && metricsUrl.endsWith(`:${port}`), `etcd ${probe} is not on the metrics listener ${metricsUrl}`);
    }
    check((flagValue(c, "--listen-client-urls") ?? "").startsWith(`${etcdScheme}://`), `etcd clients are not served over ${etcdScheme}`);
    if (opts.etcdTls === "on") {
      check(hasFlag(c, "--client-cert-auth") && hasFlag(c, "--peer-client-cert-auth"), "etcd TLS on, but client certificates are not required");
      for (const f of ["--cert-file", "--key-file", "--trusted-ca-file", "--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file"]) {
        const src = flagValue(c, f) && secretFileSource(etcd.spec.template.spec, c, flagValue(c, f));
        check(src?.secret === opts.etcdTlsServer, `etcd ${f} does not come from the server Secret ${opts.etcdTlsServer}`);
      }
    } else {
      check(!hasFlag(c, "--cert-file"), "etcd TLS flags given although etcd TLS is off");
    }
    const pdb = byKind("PodDisruptionBudget").find((p) => matches(p.spec.selector?.matchLabels, etcd.spec.template.metadata.labels));
    if (n > 1) check(pdb?.spec.minAvailable === Math.floor(n / 2) + 1, `etcd PodDisruptionBudget does not keep a quorum of ${Math.floor(n / 2) + 1}`);
    else check(!pdb, "a 1-member etcd has a PodDisruptionBudget that blocks every drain");
    // backups
    const backup = byKind("CronJob").find((j) => component(j) === "etcd-backup");
    if (check(backup, "no etcd backup CronJob")) {
      const bc = podTemplate(backup).spec.containers[0];
      checkEtcdEndpoints(label(backup), envOf(bc).ETCDCTL_ENDPOINTS);
      check(/etcdctl snapshot save/.test((bc.args ?? []).join("\n")), `${label(backup)}: does not run etcdctl snapshot save`);
      const vol = (podTemplate(backup).spec.volumes ?? []).find((v) => v.persistentVolumeClaim);
      check(vol && find("PersistentVolumeClaim", vol.persistentVolumeClaim.claimName), `${label(backup)}: snapshots go to no volume of the chart`);
    }
  }
} else {
  check(!etcd, "an etcd StatefulSet is rendered although etcd is external");
}

/** Checks that an --etcd value reaches etcd: the chart's client Service or the external URLs. */
function checkEtcdEndpoints(who, value) {
  if (!check(value, `${who}: no etcd endpoints`)) return;
  const urls = value.split(",");
  if (etcdMode === "external") {
    check(value === etcdArg, `${who}: etcd endpoints ${value}, want the external endpoints ${etcdArg}`);
    return;
  }
  for (const u of urls) {
    const url = new URL(u);
    check(url.protocol === `${etcdScheme}:`, `${who}: etcd URL ${u} is not ${etcdScheme}`);
    const [svcName, ns] = url.hostname.split(".");
    check(ns === opts.namespace && url.hostname.startsWith(`${svcName}.${ns}.svc.`), `${who}: etcd host ${url.hostname} is not a Service of the namespace`);
    const svc = find("Service", svcName);
    if (!check(svc, `${who}: etcd Service ${svcName} is not rendered`)) continue;
    const port = svc.spec.ports.find((p) => p.port === Number(url.port));
    check(port, `${who}: etcd Service ${svcName} has no port ${url.port}`);
    check(etcd && matches(svc.spec.selector, etcd.spec.template.metadata.labels), `${who}: Service ${svcName} does not select the etcd pods`);
    if (etcd && port) {
      const target = resolvePort(etcd.spec.template.spec.containers[0], port.targetPort ?? port.port);
      const listen = flagValue(etcd.spec.template.spec.containers[0], "--listen-client-urls") ?? "";
      check(target && listen.endsWith(`:${target}`), `${who}: etcd Service port ${url.port} does not reach etcd's client listener (${listen})`);
    }
  }
}

/** The etcd TLS and password flags of a kolo container come from the right Secrets. */
function checkEtcdClientFlags(w, c) {
  const who = `${label(w)}/${c.name}`;
  const spec = podTemplate(w).spec;
  for (const f of ["--etcd-ca", "--etcd-cert", "--etcd-key"]) {
    const file = flagValue(c, f);
    if (opts.etcdTls !== "on") {
      check(file === undefined, `${who}: ${f} given although etcd TLS is off`);
      continue;
    }
    const src = file && secretFileSource(spec, c, file);
    check(src?.secret === opts.etcdTlsClient, `${who}: ${f} ${file} does not come from the client Secret ${opts.etcdTlsClient}`);
  }
  const pw = flagValue(c, "--etcd-password-file");
  if (opts.etcdAuth === "on") {
    check(flagValue(c, "--etcd-user"), `${who}: no --etcd-user`);
    const src = pw && secretFileSource(spec, c, pw);
    check(src && authSecret(src.secret) && src.key === "password", `${who}: --etcd-password-file does not come from the etcd auth Secret's password`);
  } else {
    check(pw === undefined && flagValue(c, "--etcd-user") === undefined, `${who}: etcd user flags given although etcd auth is off`);
  }
}

/**
 * The worker's preStop hook must drain this very worker at the coordinator: run it with
 * /bin/sh and a stand-in CLI that records what it was given, in the environment the
 * container would have (ConfigMap, field refs, the token file with the Secret's token).
 */
function checkPreStop(w, c) {
  const who = `${label(w)}/${c.name}`;
  const command = c.lifecycle?.preStop?.exec?.command;
  if (!check(Array.isArray(command) && command.length > 0, `${who}: no preStop exec hook that drains the worker`)) return;
  const env = envOf(c);
  check(env.KOLO_WORKER_ID === "<field:metadata.name>" && flagValue(c, "--id") === env.KOLO_WORKER_ID, `${who}: KOLO_WORKER_ID is not the worker's --id`);
  const server = env.KOLO_SERVER ?? "";
  const svc = byKind("Service").find((x) => coordinator && matches(x.spec.selector, coordinator.spec.template.metadata.labels));
  const grpc = svc?.spec.ports.find((p) => p.name === "grpc");
  check(svc && server === `${svc.metadata.name}.${opts.namespace}.svc.${server.split(".svc.")[1]}` && server.endsWith(`:${grpc?.port}`),
    `${who}: KOLO_SERVER ${server} is not the coordinator Service's gRPC port`);

  const dir = mkdtempSync(path.join(os.tmpdir(), "kolo-prestop-"));
  try {
    const record = path.join(dir, "record.json");
    const cli = path.join(dir, BIN.cli);
    writeFileSync(cli, `#!/bin/sh\nnode -e 'require("fs").writeFileSync(process.argv[1], JSON.stringify({argv: process.argv.slice(2), token: process.env.KOLO_TOKEN}))' "${record}" "$@"\n`);
    chmodSync(cli, 0o755);
    const token = "prestop-token-0123456789";
    writeFileSync(path.join(dir, "token"), token);
    const runEnv = { PATH: `${dir}:${process.env.PATH}` };
    for (const [k, v] of Object.entries(env)) runEnv[k] = String(v).replace("<field:metadata.name>", "worker-pod-7");
    runEnv.KOLO_TOKEN_FILE = path.join(dir, "token");
    if (opts.tls === "on") {
      check(env.KOLO_TLS_CA && secretFileSource(w.spec.template.spec, c, env.KOLO_TLS_CA), `${who}: the CA for the drain call does not come from a Secret`);
      runEnv.KOLO_TLS_CA = path.join(dir, "ca.crt");
    }
    execFileSync(command[0], command.slice(1), { env: runEnv, stdio: "pipe", timeout: 10000 });
    const got = JSON.parse(readFileSync(record, "utf8"));
    const want = ["--server", server.replace("<field:metadata.name>", "worker-pod-7"), "--timeout", env.KOLO_DRAIN_TIMEOUT];
    check(JSON.stringify(got.argv.slice(0, 4)) === JSON.stringify(want), `${who}: preStop runs ${BIN.cli} ${got.argv.join(" ")}, want ${want.join(" ")} ...`);
    check(Number(env.KOLO_DRAIN_TIMEOUT) > 0, `${who}: drain timeout ${env.KOLO_DRAIN_TIMEOUT} is not a number of seconds`);
    check(JSON.stringify(got.argv.slice(-2)) === JSON.stringify(["drain", "worker-pod-7"]), `${who}: preStop does not run '${BIN.cli} ... drain <this worker>' (got ${got.argv.join(" ")})`);
    check(got.token === token, `${who}: preStop does not hand the CLI the token from $KOLO_TOKEN_FILE`);
    const ca = got.argv.indexOf("--tls-ca");
    if (opts.tls === "on") check(ca > 0 && got.argv[ca + 1] === runEnv.KOLO_TLS_CA, `${who}: preStop does not trust the TLS CA`);
    else check(ca < 0, `${who}: preStop passes --tls-ca although TLS is off`);
    checkFlagsKnown(`${who} preStop`, BIN.cli, got.argv);
    check(grace(w) >= Number(env.KOLO_DRAIN_TIMEOUT) + 20, `${who}: terminationGracePeriodSeconds ${grace(w)} is shorter than the drain needs`);
  } catch (err) {
    check(false, `${who}: preStop hook failed to run: ${err.message.split("\n")[0]}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const grace = (w) => w.spec.template.spec.terminationGracePeriodSeconds;

// ---- 5. coordinators: etcd, token, TLS, listeners, probes -------------------------------
function checkTokenFile(w, c, file) {
  const who = `${label(w)}/${c.name}`;
  if (!check(file, `${who}: no token file`)) return;
  const src = secretFileSource(podTemplate(w).spec, c, file);
  if (!check(src, `${who}: token file ${file} does not come from a Secret`)) return;
  const secret = authSecret(src.secret);
  if (!check(secret, `${who}: token Secret ${src.secret} is not rendered`)) return;
  if (secret.data === null) return; // an existing Secret, made outside the chart
  const raw = secret.data?.[src.key];
  if (!check(raw, `${who}: Secret ${src.secret} has no key ${src.key}`)) return;
  const token = Buffer.from(raw, "base64").toString("utf8");
  check(token.length >= 16, `${who}: token of ${token.length} characters is too short`);
  if (opts.token) check(token === opts.token, `${who}: the Secret holds a different token than the one given`);
}

const coordinatorService = coordinator && byKind("Service").find((s) => matches(s.spec.selector, coordinator.spec.template.metadata.labels));
if (coordinator) {
  const spec = coordinator.spec.template.spec;
  const c = spec.containers[0];
  const who = label(coordinator);
  check(c.command?.[0] === BIN.server, `${who}: runs ${c.command?.[0]}, not ${BIN.server}`);
  checkEtcdEndpoints(who, flagValue(c, "--etcd"));
  checkEtcdClientFlags(coordinator, c);
  checkTokenFile(coordinator, c, flagValue(c, "--token-file"));
  if (opts.existingSecrets) check(!byKind("Secret").some((s) => existing.includes(s.metadata.name)), "the chart creates a Secret it was told exists already");

  check(flagValue(c, "--name") === "<field:metadata.name>", `${who}: --name is not the pod's name (election candidates must differ)`);
  check(["error", "warn", "info", "debug"].includes(flagValue(c, "--log-level")), `${who}: --log-level ${flagValue(c, "--log-level")} is not a kolo-server level`);
  const grpcListen = flagValue(c, "--grpc-listen") ?? "";
  const httpListen = flagValue(c, "--http-listen") ?? "";
  const grpcPort = Number(grpcListen.split(":").pop());
  const httpPort = Number(httpListen.split(":").pop());
  check(grpcListen.startsWith("0.0.0.0:") && grpcPort > 0, `${who}: --grpc-listen ${grpcListen} is not 0.0.0.0:<port>`);
  check(httpListen.startsWith("0.0.0.0:") && httpPort > 0, `${who}: --http-listen ${httpListen} is not 0.0.0.0:<port>`);
  check(resolvePort(c, "grpc") === grpcPort, `${who}: container port grpc is not the gRPC listener ${grpcPort}`);
  check(resolvePort(c, "http") === httpPort, `${who}: container port http is not the HTTP listener ${httpPort}`);

  const scheme = opts.tls === "on" ? "HTTPS" : "HTTP";
  for (const [probe, route] of [["readinessProbe", ROUTES.readyz], ["livenessProbe", ROUTES.healthz]]) {
    const get = c[probe]?.httpGet;
    if (!check(get, `${who}: no ${probe} httpGet`)) continue;
    check(get.path === route, `${who}: ${probe} hits ${get.path}, want ${route}`);
    check(resolvePort(c, get.port) === httpPort, `${who}: ${probe} hits port ${get.port}, not the HTTP listener ${httpPort}`);
    check((get.scheme ?? "HTTP") === scheme, `${who}: ${probe} uses ${get.scheme ?? "HTTP"}, want ${scheme}`);
  }

  if (check(coordinatorService, `${who}: no Service`)) {
    for (const [name, port] of [["grpc", grpcPort], ["http", httpPort]]) {
      const p = coordinatorService.spec.ports.find((x) => x.name === name);
      check(p && resolvePort(c, p.targetPort) === port, `${label(coordinatorService)}: port ${name} does not reach the ${name} listener ${port}`);
    }
  }

  const cert = flagValue(c, "--tls-cert");
  const key = flagValue(c, "--tls-key");
  if (opts.tls === "on") {
    for (const [file, want] of [[cert, "tls.crt"], [key, "tls.key"]]) {
      const src = file && secretFileSource(spec, c, file);
      if (!check(src, `${who}: TLS file ${file} does not come from a Secret`)) continue;
      check(src.key === want, `${who}: ${file} comes from key ${src.key}, want ${want}`);
      const secret = authSecret(src.secret);
      check(secret, `${who}: TLS Secret ${src.secret} is not rendered`);
      if (secret?.data) check(secret.data[want], `${who}: TLS Secret has no ${want}`);
    }
  } else {
    check(cert === undefined && key === undefined, `${who}: TLS flags given although TLS is off`);
  }
  check(coordinator.spec.replicas >= 2, `${who}: fewer than 2 coordinators by default`);
}

// ---- 6. workers: etcd, token, advertise, readiness, drain, GPUs -------------------------------
if (worker) {
  const spec = worker.spec.template.spec;
  const c = spec.containers[0];
  const who = label(worker);
  check(c.command?.[0] === BIN.worker, `${who}: runs ${c.command?.[0]}, not ${BIN.worker}`);
  checkEtcdEndpoints(who, flagValue(c, "--etcd"));
  checkEtcdClientFlags(worker, c);
  checkTokenFile(worker, c, envOf(c).KOLO_TOKEN_FILE);
  const advertise = flagValue(c, "--advertise") ?? "";
  const port = Number(advertise.split(":").pop());
  check(port > 0 && resolvePort(c, "peer") === port, `${who}: --advertise ${advertise} is not host:<declared peer port>`);
  check(/^(<field:status\.podIP>|<field:metadata\.name>\.)/.test(advertise), `${who}: --advertise ${advertise} is neither the pod IP nor its DNS name`);
  check(flagValue(c, "--listen") === `0.0.0.0:${port}`, `${who}: --listen ${flagValue(c, "--listen")} is not 0.0.0.0:${port}`);
  check(flagValue(c, "--id") === "<field:metadata.name>", `${who}: --id is not the pod's stable name`);
  check(Number(flagValue(c, "--gpus")) === opts.gpus, `${who}: --gpus ${flagValue(c, "--gpus")}, want ${opts.gpus}`);
  check(Number(flagValue(c, "--lease-ttl")) >= 2, `${who}: --lease-ttl below 2 s`);
  const workDir = flagValue(c, "--work-dir");
  check(workDir && (c.volumeMounts ?? []).some((m) => m.mountPath === workDir), `${who}: --work-dir ${workDir} is not a mounted volume`);
  // ready = registered in etcd: kolo-worker's /readyz on its --http-listen port
  const health = flagValue(c, "--http-listen") ?? "";
  const healthPort = Number(health.split(":").pop());
  check(health.startsWith("0.0.0.0:") && resolvePort(c, "health") === healthPort, `${who}: --http-listen ${health} is not 0.0.0.0:<declared health port>`);
  for (const [probe, route] of [["readinessProbe", ROUTES.readyz], ["livenessProbe", ROUTES.healthz]]) {
    const get = c[probe]?.httpGet;
    if (!check(get, `${who}: no ${probe} httpGet (a rollout would not wait for the worker to be back)`)) continue;
    check(get.path === route && resolvePort(c, get.port) === healthPort, `${who}: ${probe} hits ${get.path} on ${get.port}, want ${route} on the health port ${healthPort}`);
  }
  // job logs on a pinned port, so that the NetworkPolicy can name it (the default is a free port)
  const logs = flagValue(c, "--logs-listen") ?? "";
  check(logs.startsWith("0.0.0.0:") && resolvePort(c, "logs") === Number(logs.split(":").pop()),
    `${who}: --logs-listen ${logs || "(none: a random port)"} is not 0.0.0.0:<declared logs port>`);

  checkPreStop(worker, c);
  check(grace(worker) >= 30, `${who}: terminationGracePeriodSeconds ${grace(worker)} leaves no time to drain`);
  check((spec.topologySpreadConstraints ?? []).some((t) => matches(t.labelSelector?.matchLabels, worker.spec.template.metadata.labels)), `${who}: no topology spread over its own pods`);
  check(worker.spec.replicas >= 0, `${who}: no replica count (Kubernetes would default it to 1 on an upgrade)`);
}

// ---- 7. autoscaling on the demand for workers --------------------------------------------------
const hpas = byKind("HorizontalPodAutoscaler");
const scaledObjects = byKind("ScaledObject");
const targetsWorkers = (ref) => ref?.apiVersion === "apps/v1" && ref.kind === "StatefulSet" && ref.name === worker?.metadata.name;
if (opts.autoscaling === "hpa") {
  if (check(hpas.length === 1, `want 1 HorizontalPodAutoscaler, got ${hpas.length}`)) {
    const h = hpas[0];
    check(h.apiVersion === "autoscaling/v2", `${label(h)}: ${h.apiVersion}, want autoscaling/v2`);
    check(targetsWorkers(h.spec.scaleTargetRef), `${label(h)}: does not target the worker StatefulSet`);
    check(h.spec.minReplicas >= 1 && h.spec.minReplicas <= h.spec.maxReplicas, `${label(h)}: min ${h.spec.minReplicas} max ${h.spec.maxReplicas}`);
    check((h.spec.metrics ?? []).length > 0, `${label(h)}: no metrics`);
    if (opts.hpaMetric !== "custom") {
      const m = (h.spec.metrics ?? []).find((x) => x.type === "External");
      check(m?.external.metric.name === "kolo_workers_wanted" && m.external.target.type === "AverageValue" && String(m.external.target.averageValue) === "1",
        `${label(h)}: does not scale one worker per kolo_workers_wanted`);
      check(m?.external.metric.selector?.matchLabels?.service === coordinatorService?.metadata.name, `${label(h)}: the metric does not select the coordinators' series`);
    }
  }
} else {
  check(hpas.length === 0, "a HorizontalPodAutoscaler is rendered although the hpa engine is off");
}
if (opts.autoscaling === "keda") {
  if (check(scaledObjects.length === 1, `want 1 ScaledObject, got ${scaledObjects.length}`)) {
    const so = scaledObjects[0];
    check(targetsWorkers(so.spec.scaleTargetRef), `${label(so)}: does not target the worker StatefulSet`);
    const t = so.spec.triggers?.[0];
    check(t?.type === "metrics-api" && t.metadata.valueLocation === "workers_wanted" && t.metadata.targetValue === "1",
      `${label(so)}: does not scale one worker per workers_wanted of /v1/demand`);
    const url = new URL(t?.metadata.url ?? "http://x/");
    const httpPort = coordinatorService?.spec.ports.find((p) => p.name === "http")?.port;
    check(url.hostname.startsWith(`${coordinatorService?.metadata.name}.${opts.namespace}.svc.`) && Number(url.port) === httpPort && url.pathname === ROUTES.demand,
      `${label(so)}: ${t?.metadata.url} is not the coordinators' ${ROUTES.demand}`);
    check(url.protocol === (opts.tls === "on" ? "https:" : "http:"), `${label(so)}: ${url.protocol} against a coordinator with TLS ${opts.tls}`);
    check(t?.metadata.authMode === "bearer", `${label(so)}: /v1/demand needs the API token (authMode bearer)`);
    const ta = find("TriggerAuthentication", t?.authenticationRef?.name);
    const tokenRef = ta?.spec.secretTargetRef?.find((r) => r.parameter === "token");
    check(tokenRef && authSecret(tokenRef.name), `${label(so)}: the bearer token does not come from the token Secret`);
  }
} else {
  check(scaledObjects.length === 0, "a ScaledObject is rendered although the keda engine is off");
}

// ---- 8. NetworkPolicies ----------------------------------------------------------------------
const pods = (comp) => workloads.filter((w) => component(w) === comp).map((w) => podTemplate(w).metadata.labels);
/** Whether a policy's ingress lets a pod with these labels (same namespace) reach port. */
function admits(policy, container, fromLabels, port) {
  return (policy.spec.ingress ?? []).some((rule) => {
    const portOk = !rule.ports || rule.ports.some((p) => resolvePort(container, p.port) === port);
    const fromOk = !rule.from || rule.from.some((peer) => peer.podSelector && !peer.namespaceSelector && selects(peer.podSelector, fromLabels));
    return portOk && fromOk;
  });
}
const policyFor = (w) => byKind("NetworkPolicy").find((p) => selects(p.spec.podSelector, podTemplate(w).metadata.labels));
const stranger = { "app.kubernetes.io/name": "other", "app.kubernetes.io/instance": "x", app: "debug-shell" };
if (opts.networkPolicy === "on") {
  if (etcd) {
    const p = policyFor(etcd);
    const c = etcd.spec.template.spec.containers[0];
    if (check(p && p.spec.policyTypes?.includes("Ingress"), "no NetworkPolicy for etcd")) {
      const client = resolvePort(c, "client"), peer = resolvePort(c, "peer");
      for (const labels of [...pods("coordinator"), ...pods("worker"), ...pods("etcd-backup")]) {
        check(admits(p, c, labels, client), `${label(p)}: a ${labels["app.kubernetes.io/component"]} pod cannot reach etcd`);
      }
      check(!admits(p, c, stranger, client), `${label(p)}: any pod can reach etcd's client port (and write job specs that run code on every worker)`);
      check(!admits(p, c, stranger, peer), `${label(p)}: any pod can reach etcd's peer port`);
      check(!admits(p, c, pods("worker")[0] ?? {}, peer), `${label(p)}: workers can reach etcd's peer port`);
      for (const labels of pods("etcd")) check(admits(p, c, labels, peer), `${label(p)}: etcd members cannot reach each other`);
    }
  }
  if (worker) {
    const p = policyFor(worker);
    const c = worker.spec.template.spec.containers[0];
    if (check(p, "no NetworkPolicy for the workers")) {
      const data = resolvePort(c, "peer");
      check(admits(p, c, worker.spec.template.metadata.labels, data), `${label(p)}: workers cannot reach each other's data-plane port`);
      check(!admits(p, c, stranger, data), `${label(p)}: any pod can reach the workers' data-plane port`);
      check(!admits(p, c, coordinator?.spec.template.metadata.labels ?? {}, data), `${label(p)}: the coordinators can reach the data plane`);
      check(admits(p, c, stranger, resolvePort(c, "health")) || (p.spec.ingress ?? []).some((r) => r.from && r.ports?.some((x) => resolvePort(c, x.port) === resolvePort(c, "health"))),
        `${label(p)}: nobody may scrape the workers' health port`);
      const logs = resolvePort(c, "logs");
      for (const labels of pods("coordinator"))
        check(admits(p, c, labels, logs), `${label(p)}: the coordinators cannot fetch job logs from the workers' logs port`);
      check(!admits(p, c, stranger, logs), `${label(p)}: any pod can reach the workers' logs port`);
    }
  }
  if (coordinator) {
    const p = policyFor(coordinator);
    const c = coordinator.spec.template.spec.containers[0];
    if (check(p, "no NetworkPolicy for the coordinators")) {
      check(admits(p, c, worker?.spec.template.metadata.labels ?? {}, resolvePort(c, "grpc")), `${label(p)}: the workers' drain hook cannot reach the coordinators`);
    }
  }
} else {
  check(byKind("NetworkPolicy").length === 0, "NetworkPolicies rendered although they are off");
}

// ---- 9. monitoring -----------------------------------------------------------------------------
if (opts.monitoring === "on") {
  const sm = byKind("ServiceMonitor")[0];
  if (check(sm, "no ServiceMonitor")) {
    check(coordinatorService && matches(sm.spec.selector?.matchLabels, coordinatorService.metadata.labels), `${label(sm)}: does not select the coordinators' Service`);
    const ep = sm.spec.endpoints?.[0];
    check(ep?.port === "http" && ep.path === ROUTES.metrics, `${label(sm)}: does not scrape ${ROUTES.metrics} on the http port`);
    const cred = ep?.authorization?.credentials;
    check(ep?.authorization?.type === "Bearer" && cred && authSecret(cred.name) && cred.key, `${label(sm)}: /metrics needs the API token from the token Secret`);
    check(ep?.scheme === (opts.tls === "on" ? "https" : "http"), `${label(sm)}: scheme ${ep?.scheme} with TLS ${opts.tls}`);
  }
  const pm = byKind("PodMonitor")[0];
  if (check(pm, "no PodMonitor")) {
    check(worker && matches(pm.spec.selector?.matchLabels, worker.spec.template.metadata.labels), `${label(pm)}: does not select the worker pods`);
    const ep = pm.spec.podMetricsEndpoints?.[0];
    check(ep?.path === ROUTES.metrics && worker && resolvePort(worker.spec.template.spec.containers[0], ep.port), `${label(pm)}: does not scrape the workers' ${ROUTES.metrics}`);
  }
} else {
  check(byKind("ServiceMonitor").length + byKind("PodMonitor").length === 0, "monitors rendered although monitoring is off");
}

// GPUs: requested by the workers exactly when asked, by nothing else ever.
for (const w of workloads) {
  const spec = podTemplate(w).spec;
  for (const c of spec.containers) {
    const res = c.resources ?? {};
    const asked = [res.limits?.["nvidia.com/gpu"], res.requests?.["nvidia.com/gpu"]].filter((v) => v !== undefined);
    const want = w === worker ? opts.gpus : 0;
    if (want > 0) {
      check(Number(res.limits?.["nvidia.com/gpu"]) === want, `${label(w)}/${c.name}: GPU limit ${res.limits?.["nvidia.com/gpu"]}, want ${want}`);
      check((spec.tolerations ?? []).some((t) => t.key === "nvidia.com/gpu"), `${label(w)}: cannot land on tainted GPU nodes`);
    } else {
      check(asked.length === 0, `${label(w)}/${c.name}: requests GPUs although none were asked for`);
      check(!(spec.tolerations ?? []).some((t) => t.key === "nvidia.com/gpu"), `${label(w)}: tolerates GPU taints although it needs no GPU`);
    }
  }
}

// ---- report ---------------------------------------------------------------------------
if (failures.length > 0) {
  for (const f of failures) console.log(`FAIL ${f}`);
  console.log(`validate: ${failures.length} of ${checks} checks failed over ${objects.length} objects`);
  process.exit(1);
}
console.log(`validate: ${checks} checks passed over ${objects.length} objects`);
