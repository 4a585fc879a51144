// Validates the output of `helm template` for the kolo chart, offline: every object against
// Kubernetes' own schemas (npm kubernetes-models, by apiVersion/kind), with no field unknown
// to its type (from kubernetes-models' type declarations), then kolo's wiring:
// every pod finds etcd, the coordinators and workers get the token, probes hit the right
// routes and ports, GPUs are requested only when asked, the worker preStop drains.
//
// Usage: node validate.mjs --node-dir DIR --manifests FILE [expectations...]
//   --node-dir DIR            directory whose node_modules holds kubernetes-models and yaml
//   --chart DIR               the chart: binary names, flags and routes come from its
//                             values.yaml (`interface`), so a rename there needs no change here
//   --namespace NS            the namespace rendered into (default "default")
//   --etcd internal:N | external:URL[,URL...]
//   --gpus N                  GPUs per worker (0: no GPU request anywhere)
//   --autoscaling on|off
//   --tls on|off
//   --token VALUE             the token the chart's Secret must hold
//   --existing-secrets AUTH[,TLS]   secrets the chart must use without creating them
// Prints one line per failed check and exits 1 when any failed.
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

function parseArgs(argv) {
  const opts = { namespace: "default", gpus: 0, autoscaling: "off", tls: "off", etcd: "internal:1" };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "").replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (argv[i + 1] === undefined) throw new Error(`missing value after ${argv[i]}`);
    opts[key] = argv[i + 1];
  }
  if (!opts.nodeDir || !opts.manifests || !opts.chart) throw new Error("--node-dir, --chart and --manifests are required");
  opts.gpus = Number(opts.gpus);
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const require = createRequire(path.join(path.resolve(opts.nodeDir), "validate.cjs"));
const YAML = require("yaml");

const iface = YAML.parse(readFileSync(path.join(opts.chart, "values.yaml"), "utf8")).interface;
const SF = iface.serverFlags;
const WF = iface.workerFlags;

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
/** The kubernetes-models class for an apiVersion and kind, or null. */
function modelClass(apiVersion, kind) {
  try {
    return require(`kubernetes-models/${apiVersion}`)[kind] ?? null;
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
// Kubernetes' schemas accept unknown fields (the API server drops them), so kubernetes-models'
// validate() does not catch a misspelt field name in a template. Its type declarations list
// every field of every type, though; walk each object along them and report keys no type has.
const modelsDir = path.dirname(require.resolve("kubernetes-models/package.json"));
const typeCache = new Map();

/** Fields of the interface a .d.ts file declares first: Map name -> type text, or null. */
function interfaceFields(file) {
  if (typeCache.has(file)) return typeCache.get(file);
  let result = null;
  if (existsSync(file)) {
    const text = readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
    const head = text.match(/export interface (\w+)(?: extends (\w+))? \{/);
    if (head && (!head[2] || head[2] === "TypeMeta")) {
      const imports = new Map();
      for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) imports.set(m[1], m[2]);
      // The body up to the brace closing the interface, then its top-level "field"?: type; entries.
      let depth = 0;
      let i = head.index + head[0].length - 1;
      const start = i + 1;
      for (; i < text.length; i++) {
        if (text[i] === "{") depth++;
        else if (text[i] === "}" && --depth === 0) break;
      }
      const body = text.slice(start, i);
      const fields = new Map();
      let field = null;
      let type = "";
      depth = 0;
      for (const line of body.split("\n")) {
        const m = depth === 0 && line.match(/^\s*"([^"]+)"\??: (.*)$/);
        if (m) {
          field = m[1];
          type = m[2];
        } else if (field) {
          type += ` ${line.trim()}`;
        }
        depth += (line.match(/\{/g) ?? []).length - (line.match(/\}/g) ?? []).length;
        if (field && depth === 0 && type.trim().endsWith(";")) {
          fields.set(field, { type: type.trim().replace(/;$/, ""), imports, file });
          field = null;
        }
      }
      result = fields;
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
  const arr = t.match(/^Array<(.+)>$/s);
  if (arr) {
    if (Array.isArray(value)) value.forEach((v, i) => checkFields(v, arr[1], imports, from, `${where}[${i}]`));
    return;
  }
  const map = t.match(/^\{\s*\[key: string\]: (.+?);?\s*\}$/s);
  if (map) {
    if (value && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) checkFields(v, map[1], imports, from, `${where}.${k}`);
    }
    return;
  }
  if (!/^I\w+$/.test(t) || !value || typeof value !== "object" || Array.isArray(value)) return;
  const file = typeFile(t, imports, from);
  const fields = file && interfaceFields(file);
  if (!fields) return; // a type alias (Quantity, IntOrString) or unknown: nothing to check
  for (const [k, v] of Object.entries(value)) {
    const f = fields.get(k);
    if (!check(f, `${where}: unknown field "${k}"`)) continue;
    checkFields(v, f.type, f.imports, f.file, `${where}.${k}`);
  }
}

for (const o of objects) {
  const file = path.join(modelsDir, o.apiVersion ?? "", `${o.kind}.d.ts`);
  const fields = interfaceFields(file);
  if (!check(fields, `${label(o)}: no type declaration for ${o.apiVersion} ${o.kind}`)) continue;
  for (const [k, v] of Object.entries(o)) {
    const f = fields.get(k);
    if (!check(f, `${label(o)}: unknown field "${k}"`)) continue;
    checkFields(v, f.type, f.imports, f.file, `${label(o)}.${k}`);
  }
}

// ---- helpers over pods ------------------------------------------------------------------
const workloads = objects.filter((o) => ["Deployment", "StatefulSet"].includes(o.kind));
const component = (o) => o.metadata?.labels?.["app.kubernetes.io/component"];
const workload = (comp) => workloads.find((o) => component(o) === comp);
const matches = (selector, labels) =>
  selector && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);

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

/** The container port number a probe or Service targets (a number or a port name). */
function resolvePort(container, port) {
  if (typeof port === "number") return port;
  return (container.ports ?? []).find((p) => p.name === port)?.containerPort;
}

const existing = (opts.existingSecrets ?? "").split(",").filter(Boolean);
const authSecret = (name) => {
  if (existing.includes(name)) return { name, data: null };
  return find("Secret", name) ?? null;
};

// ---- 2. generic wiring of every workload ---------------------------------------------
for (const w of workloads) {
  const tpl = w.spec.template;
  const spec = tpl.spec;
  check(matches(w.spec.selector?.matchLabels, tpl.metadata?.labels), `${label(w)}: selector does not match its pod labels`);
  if (w.kind === "StatefulSet") {
    const svc = find("Service", w.spec.serviceName);
    check(svc && svc.spec.clusterIP === "None", `${label(w)}: serviceName ${w.spec.serviceName} is not a headless Service`);
  }
  check(spec.securityContext?.runAsNonRoot === true, `${label(w)}: pod not runAsNonRoot`);
  check(spec.securityContext?.runAsUser > 0, `${label(w)}: pod runAsUser must be a non-zero uid`);
  check(spec.automountServiceAccountToken === false, `${label(w)}: mounts a Kubernetes API token it does not need`);
  const sa = spec.serviceAccountName;
  check(sa && find("ServiceAccount", sa), `${label(w)}: ServiceAccount ${sa} is not rendered`);
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  const claims = new Set((w.spec.volumeClaimTemplates ?? []).map((c) => c.metadata.name));
  for (const v of volumes.values()) {
    if (v.secret) check(authSecret(v.secret.secretName), `${label(w)}: volume ${v.name} uses Secret ${v.secret.secretName}, which is not rendered`);
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
  }
}

// Every Service selects some pods and targets ports those pods declare.
for (const svc of byKind("Service")) {
  const targets = workloads.filter((w) => matches(svc.spec.selector, w.spec.template.metadata.labels));
  if (!check(targets.length === 1, `${label(svc)}: selects ${targets.length} workloads, want 1`)) continue;
  const c = targets[0].spec.template.spec.containers[0];
  for (const p of svc.spec.ports) {
    check(resolvePort(c, p.targetPort ?? p.port) !== undefined, `${label(svc)}: port ${p.name} targets ${p.targetPort}, which ${label(targets[0])} does not declare`);
  }
}

// Every PodDisruptionBudget covers a workload and leaves room to evict someone.
for (const pdb of byKind("PodDisruptionBudget")) {
  const targets = workloads.filter((w) => matches(pdb.spec.selector?.matchLabels, w.spec.template.metadata.labels));
  if (!check(targets.length === 1, `${label(pdb)}: selects ${targets.length} workloads, want 1`)) continue;
  const replicas = targets[0].spec.replicas;
  if (pdb.spec.minAvailable !== undefined && replicas !== undefined) {
    check(pdb.spec.minAvailable < replicas, `${label(pdb)}: minAvailable ${pdb.spec.minAvailable} blocks every eviction of ${replicas} replicas`);
  }
}

// ---- 3. etcd ----------------------------------------------------------------------------
const coordinator = workload("coordinator");
const worker = workload("worker");
const etcd = workload("etcd");
check(coordinator?.kind === "Deployment", "no coordinator Deployment");
check(worker?.kind === "StatefulSet", "no worker StatefulSet");

const [etcdMode, etcdArg] = opts.etcd.split(/:(.*)/s);
if (etcdMode === "internal") {
  const n = Number(etcdArg);
  if (check(etcd?.kind === "StatefulSet", "no etcd StatefulSet although the chart should run etcd")) {
    check(etcd.spec.replicas === n, `etcd has ${etcd.spec.replicas} members, want ${n}`);
    const c = etcd.spec.template.spec.containers[0];
    const cluster = (flagValue(c, "--initial-cluster") ?? "").split(",").filter(Boolean);
    check(cluster.length === n, `etcd --initial-cluster lists ${cluster.length} members, want ${n}`);
    const peerSvc = find("Service", etcd.spec.serviceName);
    cluster.forEach((m, i) => {
      const want = `${etcd.metadata.name}-${i}=http://${etcd.metadata.name}-${i}.${etcd.spec.serviceName}.${opts.namespace}.svc.`;
      check(m.startsWith(want), `etcd member ${i} is ${m}, want ${want}...`);
    });
    check(peerSvc?.spec.publishNotReadyAddresses === true, "etcd peers cannot resolve each other before they are ready");
    check((etcd.spec.volumeClaimTemplates ?? []).length === 1, "etcd members have no persistent volume");
    const pdb = byKind("PodDisruptionBudget").find((p) => matches(p.spec.selector?.matchLabels, etcd.spec.template.metadata.labels));
    if (n > 1) check(pdb?.spec.minAvailable === Math.floor(n / 2) + 1, `etcd PodDisruptionBudget does not keep a quorum of ${Math.floor(n / 2) + 1}`);
    else check(!pdb, "a 1-member etcd has a PodDisruptionBudget that blocks every drain");
  }
} else {
  check(!etcd, "an etcd StatefulSet is rendered although etcd is external");
}

/** Checks that an --etcd value reaches etcd: the chart's client Service or the external URLs. */
function checkEtcdEndpoints(who, value) {
  if (!check(value, `${who}: no --etcd endpoints`)) return;
  const urls = value.split(",");
  if (etcdMode === "external") {
    check(value === etcdArg, `${who}: --etcd ${value}, want the external endpoints ${etcdArg}`);
    return;
  }
  for (const u of urls) {
    const url = new URL(u);
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
  check(env.KOLO_WORKER_ID === "<field:metadata.name>" && flagValue(c, WF.id) === env.KOLO_WORKER_ID, `${who}: KOLO_WORKER_ID is not the worker's --id`);
  const server = env.KOLO_SERVER ?? "";
  const svc = byKind("Service").find((x) => coordinator && matches(x.spec.selector, coordinator.spec.template.metadata.labels));
  const grpc = svc?.spec.ports.find((p) => p.name === "grpc");
  check(svc && server === `${svc.metadata.name}.${opts.namespace}.svc.${server.split(".svc.")[1]}` && server.endsWith(`:${grpc?.port}`),
    `${who}: KOLO_SERVER ${server} is not the coordinator Service's gRPC port`);

  const dir = mkdtempSync(path.join(os.tmpdir(), "kolo-prestop-"));
  try {
    const record = path.join(dir, "record.json");
    const cli = path.join(dir, iface.binaries.cli);
    writeFileSync(cli, `#!/bin/sh\nnode -e 'require("fs").writeFileSync(process.argv[1], JSON.stringify({argv: process.argv.slice(2), token: process.env.${iface.cliTokenEnv}}))' "${record}" "$@"\n`);
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
    const cf = iface.cliFlags;
    const want = [cf.server, server.replace("<field:metadata.name>", "worker-pod-7"), cf.timeout];
    check(JSON.stringify(got.argv.slice(0, 3)) === JSON.stringify(want), `${who}: preStop runs ${iface.binaries.cli} ${got.argv.join(" ")}, want ${want.join(" ")} ...`);
    check(JSON.stringify(got.argv.slice(-2)) === JSON.stringify([iface.drainCommand, "worker-pod-7"]), `${who}: preStop does not run '${iface.binaries.cli} ... ${iface.drainCommand} <this worker>' (got ${got.argv.join(" ")})`);
    check(got.token === token, `${who}: preStop does not hand the CLI the token from $KOLO_TOKEN_FILE`);
    const ca = got.argv.indexOf(cf.tlsCa);
    if (opts.tls === "on") check(ca > 0 && got.argv[ca + 1] === runEnv.KOLO_TLS_CA, `${who}: preStop does not trust the TLS CA`);
    else check(ca < 0, `${who}: preStop passes ${cf.tlsCa} although TLS is off`);
  } catch (err) {
    check(false, `${who}: preStop hook failed to run: ${err.message.split("\n")[0]}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- 4. coordinators: etcd, token, TLS, listeners, probes -------------------------------
function checkTokenFile(w, c, file) {
  const who = `${label(w)}/${c.name}`;
  if (!check(file, `${who}: no token file`)) return;
  const src = secretFileSource(w.spec.template.spec, c, file);
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

if (coordinator) {
  const spec = coordinator.spec.template.spec;
  const c = spec.containers[0];
  const who = label(coordinator);
  check(c.command?.[0] === iface.binaries.server, `${who}: runs ${c.command?.[0]}, not ${iface.binaries.server}`);
  checkEtcdEndpoints(who, flagValue(c, SF.etcd));
  checkTokenFile(coordinator, c, flagValue(c, SF.tokenFile));
  if (opts.existingSecrets) check(!byKind("Secret").some((s) => existing.includes(s.metadata.name)), "the chart creates a Secret it was told exists already");

  check(flagValue(c, SF.name) === "<field:metadata.name>", `${who}: ${SF.name} is not the pod's name (election candidates must differ)`);
  check(["error", "warn", "info", "debug"].includes(flagValue(c, SF.logLevel)), `${who}: ${SF.logLevel} ${flagValue(c, SF.logLevel)} is not a kolo-server level`);
  const grpcListen = flagValue(c, SF.grpcListen) ?? "";
  const httpListen = flagValue(c, SF.httpListen) ?? "";
  const grpcPort = Number(grpcListen.split(":").pop());
  const httpPort = Number(httpListen.split(":").pop());
  check(grpcListen.startsWith("0.0.0.0:") && grpcPort > 0, `${who}: --grpc-listen ${grpcListen} is not 0.0.0.0:<port>`);
  check(httpListen.startsWith("0.0.0.0:") && httpPort > 0, `${who}: --http-listen ${httpListen} is not 0.0.0.0:<port>`);
  check(resolvePort(c, "grpc") === grpcPort, `${who}: container port grpc is not the gRPC listener ${grpcPort}`);
  check(resolvePort(c, "http") === httpPort, `${who}: container port http is not the HTTP listener ${httpPort}`);

  const scheme = opts.tls === "on" ? "HTTPS" : "HTTP";
  for (const [probe, route] of [["readinessProbe", iface.routes.readyz], ["livenessProbe", iface.routes.healthz]]) {
    const get = c[probe]?.httpGet;
    if (!check(get, `${who}: no ${probe} httpGet`)) continue;
    check(get.path === route, `${who}: ${probe} hits ${get.path}, want ${route}`);
    check(resolvePort(c, get.port) === httpPort, `${who}: ${probe} hits port ${get.port}, not the HTTP listener ${httpPort}`);
    check((get.scheme ?? "HTTP") === scheme, `${who}: ${probe} uses ${get.scheme ?? "HTTP"}, want ${scheme}`);
  }

  const svc = byKind("Service").find((s) => matches(s.spec.selector, coordinator.spec.template.metadata.labels));
  if (check(svc, `${who}: no Service`)) {
    for (const [name, port] of [["grpc", grpcPort], ["http", httpPort]]) {
      const p = svc.spec.ports.find((x) => x.name === name);
      check(p && resolvePort(c, p.targetPort) === port, `${label(svc)}: port ${name} does not reach the ${name} listener ${port}`);
    }
  }

  const cert = flagValue(c, SF.tlsCert);
  const key = flagValue(c, SF.tlsKey);
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
  check(coordinator.spec.replicas >= 2 || opts.coordinators === "1", `${who}: fewer than 2 coordinators by default`);
}

// ---- 5. workers: etcd, token, advertise, drain, GPUs, autoscaler --------------------------
if (worker) {
  const spec = worker.spec.template.spec;
  const c = spec.containers[0];
  const who = label(worker);
  checkEtcdEndpoints(who, flagValue(c, WF.etcd));
  checkTokenFile(worker, c, envOf(c).KOLO_TOKEN_FILE);
  const advertise = flagValue(c, WF.advertise) ?? "";
  const port = Number(advertise.split(":").pop());
  check(port > 0 && resolvePort(c, "peer") === port, `${who}: --advertise ${advertise} is not host:<declared peer port>`);
  check(/^(<field:status\.podIP>|<field:metadata\.name>\.)/.test(advertise), `${who}: --advertise ${advertise} is neither the pod IP nor its DNS name`);
  check(flagValue(c, WF.listen) === `0.0.0.0:${port}`, `${who}: ${WF.listen} ${flagValue(c, WF.listen)} is not 0.0.0.0:${port}`);
  check(flagValue(c, WF.id) === "<field:metadata.name>", `${who}: --id is not the pod's stable name`);
  check(Number(flagValue(c, WF.gpus)) === opts.gpus, `${who}: ${WF.gpus} ${flagValue(c, WF.gpus)}, want ${opts.gpus}`);
  check(Number(flagValue(c, WF.leaseTtl)) >= 2, `${who}: --lease-ttl below 2 s`);
  const workDir = flagValue(c, WF.workDir);
  check(workDir && (c.volumeMounts ?? []).some((m) => m.mountPath === workDir), `${who}: --work-dir ${workDir} is not a mounted volume`);

  checkPreStop(worker, c);
  check(spec.terminationGracePeriodSeconds >= 30, `${who}: terminationGracePeriodSeconds ${spec.terminationGracePeriodSeconds} leaves no time to drain`);
  check((spec.topologySpreadConstraints ?? []).some((t) => matches(t.labelSelector?.matchLabels, worker.spec.template.metadata.labels)), `${who}: no topology spread over its own pods`);

  const hpas = byKind("HorizontalPodAutoscaler");
  if (opts.autoscaling === "on") {
    if (check(hpas.length === 1, `want 1 HorizontalPodAutoscaler, got ${hpas.length}`)) {
      const h = hpas[0];
      check(h.apiVersion === "autoscaling/v2", `${label(h)}: ${h.apiVersion}, want autoscaling/v2`);
      const ref = h.spec.scaleTargetRef;
      check(ref.apiVersion === "apps/v1" && ref.kind === "StatefulSet" && ref.name === worker.metadata.name, `${label(h)}: does not target ${who}`);
      check(h.spec.minReplicas >= 1 && h.spec.minReplicas <= h.spec.maxReplicas, `${label(h)}: min ${h.spec.minReplicas} max ${h.spec.maxReplicas}`);
      check((h.spec.metrics ?? []).length > 0, `${label(h)}: no metrics`);
    }
    check(worker.spec.replicas === undefined, `${who}: sets replicas, which every helm upgrade would reset under the autoscaler`);
  } else {
    check(hpas.length === 0, "a HorizontalPodAutoscaler is rendered although autoscaling is off");
    check(worker.spec.replicas >= 0, `${who}: no replica count`);
  }
}

// GPUs: requested by the workers exactly when asked, by nothing else ever.
for (const w of workloads) {
  const spec = w.spec.template.spec;
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
