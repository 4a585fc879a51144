/* The dashboard's files (server/ui/), embedded in kolo-server at build time by
 * cmake/EmbedFiles.cmake, so the page needs nothing but the server: no CDN, no files to
 * install, no network at page load. ui.c serves them. */
#ifndef KOLO_SERVER_UI_ASSETS_H
#define KOLO_SERVER_UI_ASSETS_H

#include <stddef.h>

typedef struct kolo_server_ui_asset {
  const char *path; /* "/ui/app.js" */
  const unsigned char *data;
  size_t len;
  const char *etag; /* quoted, as sent */
} kolo_server_ui_asset;

/* Ends with an entry whose path is NULL. */
extern const kolo_server_ui_asset kolo_server_ui_assets[];

#endif
