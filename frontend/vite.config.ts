import { defineConfig } from "vite";

// `npm run dev` proxies the API and websockets to a coordinator on :8000 (`swarmhub serve`).
// The production build goes to dist/, which the coordinator serves at /.
export default defineConfig({
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
  server: {
    proxy: {
      "/api": "http://127.0.0.1:8000",
      "/ws": { target: "ws://127.0.0.1:8000", ws: true },
    },
  },
});
