/** ttpipe stages. */
package dev.ttpipe.stages;
