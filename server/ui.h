/* The dashboard's static side: which embedded asset (ui_assets.h) a URL names ("/" and "/ui/"
 * are the page itself), and its content type. Pure lookups; http_api.c sends the bytes with an
 * ETag, Cache-Control: no-cache and a Content-Security-Policy that lets the page load nothing
 * but its own files and talk to nothing but its own server. */
#ifndef KOLO_SERVER_UI_H
#define KOLO_SERVER_UI_H

#include "server/ui_assets.h"

#define KOLO_SERVER_UI_CSP                                                                      \
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " \
  "'self'; "                                                                                    \
  "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

/* The asset for url (GET /, /ui/, /ui/<file>), or NULL. */
const kolo_server_ui_asset *kolo_server_ui_find(const char *url);

/* "text/html; charset=utf-8" and so on, by the path's extension. */
const char *kolo_server_ui_content_type(const char *path);

#endif
