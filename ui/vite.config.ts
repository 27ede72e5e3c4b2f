// The dashboard's build: one index.html, one script and one stylesheet
// under fixed names (no content hashes, no timestamps), written to
// internal/ui/dist, which the binary embeds (docs/design/architecture.md,
// "The dashboard"). The same sources and pinned packages give the same
// bytes: CI rebuilds and compares.
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

const client = fileURLToPath(new URL("../clients/ts/index.js", import.meta.url));

export default defineConfig({
  base: "/",
  resolve: {
    alias: { "@tenure/client": client },
    // The client package lives outside ui/: its imports resolve to ui's
    // copies of the runtime packages.
    dedupe: ["@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-web"],
  },
  build: {
    outDir: "../internal/ui/dist",
    emptyOutDir: true,
    target: "es2022",
    sourcemap: false,
    modulePreload: false,
    reportCompressedSize: false,
    rollupOptions: {
      output: {
        entryFileNames: "assets/app.js",
        chunkFileNames: "assets/[name].js",
        assetFileNames: "assets/[name][extname]",
      },
    },
  },
});
